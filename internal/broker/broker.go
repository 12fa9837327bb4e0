package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/metastore"
	"github.com/malachi-log/malachi/internal/retention"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/tracing"
	"github.com/malachi-log/malachi/internal/vfs"
)

// Version is the broker's release, reported by status.
var Version = "0.1.0"

// Config is everything a node needs. Zero values take the documented defaults
// (withDefaults); validate refuses values that cannot work.
type Config struct {
	// DataDir holds the metadata log and the segment files.
	DataDir string
	// FS is the filesystem; default the real one.
	FS vfs.FS
	// Clock is the time source; default the wall clock.
	Clock clock.Clock
	// Logger receives operator messages; default slog.Default().
	Logger *slog.Logger
	// Tracer records the spans of produces and fetches; nil is off
	// (internal/tracing).
	Tracer *tracing.Tracer
	// NodeID names this node in replica sets and status; default "node-1".
	NodeID string
	// SegmentMaxBytes rolls a range's active segment once it holds this many
	// bytes (a soft threshold checked after each batch). Default 64 MiB.
	SegmentMaxBytes int64
	// SegmentMaxAge rolls an active segment older than this. Default 7 days,
	// floor one minute.
	SegmentMaxAge time.Duration
	// RollCheckInterval is how often the age roll is checked. Default 30 s.
	RollCheckInterval time.Duration
	// Retention is the node's value of storage policy fields
	// (retention.Field* names) a topic's policy leaves unset; a field
	// absent here is off, except the segment roll bounds, replication
	// factor and placement, which default to what the node runs with.
	Retention retention.Defaults
	// RetentionInterval is how often the retention sweep runs; 0 means
	// DefaultRetentionInterval.
	RetentionInterval time.Duration
	// FetchMaxBytes bounds the record bytes of one fetch page. Default
	// 1 MiB: with at most 256 requests in flight per connection, a client
	// that pipelines fetches and reads slowly pins at most ~256 MiB.
	FetchMaxBytes int
	// LongPollMax caps wait_ms. Default 30 s.
	LongPollMax time.Duration
	// GroupSessionTimeout evicts silent group members. Default 30 s.
	GroupSessionTimeout time.Duration
	// MaxGroups and MaxMembersPerGroup bound the group coordinator.
	MaxGroups          int
	MaxMembersPerGroup int
	// MaxPendingBytes bounds produced bytes waiting for their fsync.
	MaxPendingBytes int64
	// NoJournal makes every commit round fsync each segment file it wrote
	// instead of the node journal (storage.Config.NoJournal).
	NoJournal bool
	// JournalPrealloc zero-fills a journal file ahead when there is none to
	// recycle (storage.Config.JournalPrealloc); serve turns it on.
	JournalPrealloc bool
	// Codec compresses stored batches; default none.
	Codec segment.Codec
	// ACLStrict requires an explicit grant for non-admin topic access.
	ACLStrict bool
	// AutoSplit configures automatic splitting and merging of ranges.
	AutoSplit AutoSplit
	// Auth configures logins, their limits and the audit log.
	Auth AuthConfig
	// Limits bound topics, ranges, groups and open files, node-wide and
	// per user, so one ordinary user cannot exhaust the node.
	Limits Limits
	// AllowOpenPermissions lets the node start on a data directory that
	// group or others may enter (see checkDataDir); it is then left as is.
	AllowOpenPermissions bool
	// Cluster, when set, makes the node a member of a cluster: its
	// metadata goes through the control plane instead of the local
	// metadata store (see ClusterConfig and cluster.go). Nil runs a single
	// node.
	Cluster *ClusterConfig
}

func (c Config) withDefaults() Config {
	if c.FS == nil {
		c.FS = vfs.OS()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Cluster != nil {
		cl := c.Cluster.withDefaults()
		c.Cluster = &cl
		if c.NodeID == "" {
			c.NodeID = clusterNodeName(cl.NodeID)
		}
	}
	if c.NodeID == "" {
		c.NodeID = "node-1"
	}
	if c.SegmentMaxBytes == 0 {
		c.SegmentMaxBytes = 64 << 20
	}
	if c.SegmentMaxAge == 0 {
		c.SegmentMaxAge = 7 * 24 * time.Hour
	}
	if c.RollCheckInterval == 0 {
		c.RollCheckInterval = 30 * time.Second
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if canon, err := metadata.ValidatePolicy(c.Retention); err == nil {
		// Aliases ("retention.max_age_ms") under their canonical names,
		// which is all Resolve looks up; an invalid map is left for
		// validate to refuse.
		c.Retention = canon
	}
	if c.FetchMaxBytes == 0 {
		c.FetchMaxBytes = 1 << 20
	}
	if c.LongPollMax == 0 {
		c.LongPollMax = 30 * time.Second
	}
	if c.GroupSessionTimeout == 0 {
		c.GroupSessionTimeout = 30 * time.Second
	}
	if c.MaxGroups == 0 {
		c.MaxGroups = 10000
	}
	if c.MaxMembersPerGroup == 0 {
		c.MaxMembersPerGroup = 1000
	}
	if c.MaxPendingBytes == 0 {
		c.MaxPendingBytes = 64 << 20
	}
	c.AutoSplit = c.AutoSplit.withDefaults()
	c.Auth = c.Auth.withDefaults()
	c.Limits = c.Limits.withDefaults()
	return c
}

func (c Config) validate() error {
	switch {
	case c.DataDir == "":
		return errors.New("broker: DataDir is required")
	case c.SegmentMaxBytes < 1<<10:
		return fmt.Errorf("broker: SegmentMaxBytes %d is below 1 KiB", c.SegmentMaxBytes)
	case c.SegmentMaxAge < time.Minute:
		return fmt.Errorf("broker: SegmentMaxAge %v is below the one-minute floor", c.SegmentMaxAge)
	case c.FetchMaxBytes < 1<<10:
		return fmt.Errorf("broker: FetchMaxBytes %d is below 1 KiB", c.FetchMaxBytes)
	case c.MaxPendingBytes < 1<<20:
		return fmt.Errorf("broker: MaxPendingBytes %d is below 1 MiB", c.MaxPendingBytes)
	case c.RetentionInterval < 0:
		return fmt.Errorf("broker: RetentionInterval %v is negative", c.RetentionInterval)
	}
	if _, err := metadata.ValidatePolicy(c.Retention); err != nil {
		return fmt.Errorf("broker: Retention defaults: %w", err)
	}
	if c.Cluster != nil {
		if err := c.Cluster.validate(); err != nil {
			return err
		}
		if want := clusterNodeName(c.Cluster.NodeID); c.NodeID != want {
			return fmt.Errorf("broker: NodeID %q: a cluster node is named %q after its Cluster.NodeID", c.NodeID, want)
		}
	}
	return c.Limits.validate(c.MaxGroups)
}

// Broker is one node: it owns the metadata store, the segment store, the
// write heads of the ranges, the group coordinator and the watchers that
// long polls and subscriptions sleep on.
type Broker struct {
	cfg Config
	log *slog.Logger
	// meta is the local metadata store of a single node (nil in a
	// cluster); every metadata read and write goes through plane.
	meta    *metastore.Store
	plane   metaPlane
	cluster *clusterNode // nil on a single node
	data    *dataPlane   // the data path between nodes; nil on a single node
	store   *storage.Store
	authn   *authState // logins, revocation and the audit log
	secret  []byte
	started time.Time
	// cursors holds the large cursors pages handed out, decoded
	// (cursorcache.go).
	cursors *cursorCache

	// keyless spreads records without a key across a topic's ranges.
	keyless atomic.Uint64
	// opens bounds the goroutines that open segments ahead of a request's
	// appends, node-wide (produce_open.go).
	opens openWorkers
	stats brokerStats // counters for metrics (stats.go)
	// coord is the consumer-group coordinator, under its own lock.
	coord *coordinator

	mu struct {
		sync.Mutex
		heads   map[uint64]*head       // range id -> write head
		watches map[uint64]*watch      // topic id -> watch
		meters  map[uint64]*rangeMeter // range id -> last reshard look
	}

	// segFloor is, per shard, one past the highest segment id the store
	// has held: the lowest id open_segment may hand out there (see
	// metadata.Command.MinID).
	segFloor segFloors

	// life is the broker's own lifetime: work the broker owns (opening,
	// rolling and sealing segments) runs on it, never on a client's
	// context, so a client that goes away cannot leave it half done. Close
	// cancels it once the maintenance loop has stopped.
	life    context.Context
	endLife context.CancelFunc

	lock    *os.File // the data directory's lock, held for the node's life
	stop    context.CancelFunc
	done    sync.WaitGroup
	closed  atomic.Bool
	closeMu sync.Mutex
}

// Open starts a broker on cfg.DataDir: it opens the metadata store, recovers
// the segment store, reconciles the two and starts the roll loop.
func Open(ctx context.Context, cfg Config) (*Broker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := makeDurableDir(cfg.FS, cfg.DataDir); err != nil {
		return nil, fmt.Errorf("broker: data dir: %w", err)
	}
	var lock *os.File
	if cfg.FS == vfs.OS() {
		if err := checkDataDir(cfg.DataDir, cfg.AllowOpenPermissions, cfg.Logger); err != nil {
			return nil, err
		}
		warnOpenFiles(cfg.Limits, cfg.Logger)
		l, err := lockDataDir(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		lock = l
	}
	b, err := open(ctx, cfg)
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		return nil, err
	}
	b.lock = lock
	return b, nil
}

func open(ctx context.Context, cfg Config) (*Broker, error) {
	b := &Broker{cfg: cfg, log: cfg.Logger, started: cfg.Clock.Now(), cursors: newCursorCache(cursorCacheBytes)}
	b.mu.heads = make(map[uint64]*head)
	b.mu.watches = make(map[uint64]*watch)
	b.coord = newCoordinator(cfg)
	b.life, b.endLife = context.WithCancel(context.Background())
	if err := b.openMeta(ctx); err != nil {
		b.endLife()
		return nil, err
	}
	store, err := storage.Open(storage.Config{
		Dir:             filepath.Join(cfg.DataDir, "segments"),
		FS:              cfg.FS,
		MaxPendingBytes: cfg.MaxPendingBytes,
		MaxOpenFiles:    cfg.Limits.MaxOpenSealedFiles,
		NoJournal:       cfg.NoJournal,
		JournalPrealloc: cfg.JournalPrealloc,
	})
	if err != nil {
		b.endLife()
		b.closeMeta()
		return nil, fmt.Errorf("broker: segments: %w", err)
	}
	b.store = store
	if err := b.initCluster(ctx); err != nil {
		b.endLife()
		b.closeStores()
		return nil, err
	}
	if err := b.recover(); err != nil {
		b.endLife()
		b.closeStores()
		return nil, err
	}
	if err := b.initAuth(); err != nil {
		b.endLife()
		b.closeStores()
		return nil, err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	b.stop = cancel
	b.done.Add(1)
	go b.maintenanceLoop(loopCtx)
	if b.cluster == nil {
		b.done.Add(1)
		go b.spaceLoop(loopCtx)
	}
	if b.cluster != nil {
		b.done.Add(2)
		go b.clusterLoop(loopCtx)
		go b.dataLoop(loopCtx)
		b.data.ready.Store(true)
	}
	return b, nil
}

// openMeta opens where the metadata lives: the local metadata store, or
// in a cluster the control plane with its transport and gossip.
func (b *Broker) openMeta(ctx context.Context) error {
	if b.cfg.Cluster != nil {
		return b.openCluster(ctx)
	}
	if err := refuseClusterDir(b.cfg.FS, b.cfg.DataDir); err != nil {
		return err
	}
	meta, err := metastore.Open(b.cfg.FS, filepath.Join(b.cfg.DataDir, "meta"), metastore.Options{})
	if err != nil {
		return fmt.Errorf("broker: metadata: %w", err)
	}
	b.meta, b.plane = meta, localMeta{s: meta}
	return nil
}

// closeMeta closes the metadata plane and, in a cluster, the transport
// and gossip after it.
func (b *Broker) closeMeta() error {
	if b.cluster != nil {
		return b.closeCluster()
	}
	return b.plane.Close()
}

// makeDurableDir creates dir and fsyncs every ancestor, so the directory
// itself survives a power loss: a created entry is durable only once its
// parent directory is synced.
func makeDurableDir(fs vfs.FS, dir string) error {
	if err := fs.MkdirAll(dir, vfs.DirMode); err != nil {
		return err
	}
	for d := filepath.Clean(dir); ; {
		parent := filepath.Dir(d)
		if parent == d {
			return nil
		}
		if err := fs.SyncDir(parent); err != nil {
			return err
		}
		d = parent
	}
}

// initCluster gives a fresh node its cluster secret (the cursor MAC key).
// A cluster node has it from the control plane (openCluster waited for
// it).
func (b *Broker) initCluster(ctx context.Context) error {
	if b.cluster != nil {
		return nil
	}
	var secret []byte
	_ = b.plane.ViewRoot(func(st *metadata.State) { secret = append([]byte(nil), st.ClusterSecret()...) })
	if len(secret) > 0 {
		b.secret = secret
		return nil
	}
	secret = make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("broker: cluster secret: %w", err)
	}
	res, err := b.plane.Apply(ctx, metadata.Command{V: 1, Kind: "init_cluster", Now: b.nowMs(), ClusterSecret: secret})
	if err != nil {
		return fmt.Errorf("broker: init cluster: %w", err)
	}
	if res.Err != nil {
		return fmt.Errorf("broker: init cluster: %w", res.Err)
	}
	b.secret = secret
	return nil
}

// Close stops the maintenance loop, wakes every waiter and closes the
// stores. Produces still queued are flushed by the segment store's Close.
func (b *Broker) Close() error {
	b.closeMu.Lock()
	defer b.closeMu.Unlock()
	if b.closed.Swap(true) {
		return nil
	}
	// A roll's seal waits behind a round that waits for disk space, on
	// the broker's life, which ends only after the loops stop; one loop
	// runs such a roll, or waits for the head lock a produce holds while
	// it does. A closing node does not wait for space to come back: the
	// round gives up, and the seal with it.
	b.store.StopWaitingForSpace()
	b.stop()
	b.done.Wait()
	if b.data != nil {
		b.data.close()
	}
	b.endLife()
	b.waitFailovers()
	b.waitHeal()
	b.mu.Lock()
	for _, w := range b.mu.watches {
		w.fire()
	}
	b.mu.Unlock()
	return b.closeStores()
}

func (b *Broker) closeStores() error {
	serr := b.store.Close()
	merr := b.closeMeta()
	aerr := b.closeAuth()
	if b.lock != nil {
		b.lock.Close()
	}
	return errors.Join(serr, merr, aerr)
}

func (b *Broker) nowMs() int64 { return b.cfg.Clock.Now().UnixMilli() }

// apply runs one metadata command and folds the state machine's refusal
// into the returned error.
func (b *Broker) apply(ctx context.Context, cmd metadata.Command) (metadata.Result, error) {
	cmd.V = 1
	if cmd.Now == 0 {
		cmd.Now = b.nowMs()
	}
	if b.cluster != nil {
		// Never wait on a group without a quorum for longer than a
		// client would: the request answers metadata_unavailable.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.cluster.cfg.MetadataTimeout)
		defer cancel()
	}
	res, err := b.plane.Apply(ctx, cmd)
	if err != nil {
		return res, metaError(err)
	}
	return res, res.Err
}

// maintenanceLoop rolls segments by age, expires silent group members,
// runs the range coordinator and, every RetentionInterval, the retention
// sweep. It is the broker's only long-lived goroutine
// and exits when Close cancels ctx.
func (b *Broker) maintenanceLoop(ctx context.Context) {
	defer b.done.Done()
	interval := min(b.cfg.RollCheckInterval, b.cfg.RetentionInterval)
	if b.cfg.AutoSplit.enabled() {
		interval = min(interval, b.cfg.AutoSplit.Interval)
	}
	nextSweep := b.cfg.Clock.Now().Add(b.cfg.RetentionInterval)
	for {
		t := b.cfg.Clock.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		b.rollAged()
		b.expireMembers()
		b.reshardTick(ctx)
		if now := b.cfg.Clock.Now(); !now.Before(nextSweep) {
			// ctx is the loop's own: a file goes only once the metadata
			// answered, so a sweep Close cuts short leaves nothing half done.
			b.sweepRetention(ctx)
			nextSweep = now.Add(b.cfg.RetentionInterval)
		}
	}
}
