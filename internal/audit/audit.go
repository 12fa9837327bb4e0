// Package audit writes the security audit log: one JSON object per line,
// appended to a file that rotates by size and keeps a bounded number of
// old files.
//
// Events are queued to one writer goroutine, which Open starts and Close
// stops after writing what is queued. The queue is bounded and Record
// never blocks: when it is full the event is dropped and counted, and the
// writer reports the count in an audit_events_dropped event once it
// catches up. A queue rather than a write under a lock keeps a slow or
// stalled disk (a rotation, a full device) off the request paths that
// record events, logins and admin operations among them.
//
// Events carry no secrets: there is no field for a password, token or
// key, and callers put only names, addresses and reasons in them.
package audit

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/vfs"
)

// Event types.
const (
	AuthSuccess      = "auth_success"
	AuthFailure      = "auth_failure"
	AuthLockout      = "auth_lockout"
	Revoked          = "credentials_revoked" // an open connection refused after a revocation
	PermissionDenied = "permission_denied"
	UserCreated      = "user_created"
	UserDeleted      = "user_deleted"
	PasswordChanged  = "password_changed"
	ACLGranted       = "acl_granted"
	ACLRevoked       = "acl_revoked"
	TopicCreated     = "topic_created"
	TopicDeleted     = "topic_deleted"
	RangeSplit       = "range_split"
	RangesMerged     = "ranges_merged"
	EventsDropped    = "audit_events_dropped"
)

// Results.
const (
	ResultOK      = "ok"
	ResultRefused = "refused"
)

// Event is one line of the log.
type Event struct {
	Seq    uint64    `json:"seq"` // per process; a gap is a dropped event
	Time   time.Time `json:"time"`
	Node   string    `json:"node,omitempty"`
	Type   string    `json:"type"`
	Result string    `json:"result"`
	User   string    `json:"user,omitempty"`   // who acted, or tried to
	Peer   string    `json:"peer,omitempty"`   // the client's address
	Method string    `json:"method,omitempty"` // how it authenticated: password, mtls, token
	Reason string    `json:"reason,omitempty"` // the wire reason of a refusal
	Target string    `json:"target,omitempty"` // the user or topic acted on
	// Detail holds the operation's other arguments (an ACL's operation and
	// pattern, a range id, a lock's duration).
	Detail map[string]string `json:"detail,omitempty"`
}

// Config configures the log. Zero values take the defaults.
type Config struct {
	// Path is the log file; empty disables the audit log.
	Path string
	// MaxFileBytes rotates the file before it would pass this size.
	// Default 10 MiB.
	MaxFileBytes int64
	// MaxFiles is how many rotated files (Path.1 the newest … Path.N) are
	// kept besides the live one. Default 5.
	MaxFiles int
	// QueueLen bounds the events waiting for the writer. Default 4096.
	QueueLen int
	// FS is the filesystem; default the real one.
	FS vfs.FS
	// Node names this node in every event.
	Node string
	// Logger receives the log's own write errors; default slog.Default().
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultMaxFileBytes = 10 << 20
	DefaultMaxFiles     = 5
	DefaultQueueLen     = 4096
)

func (c Config) withDefaults() Config {
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.MaxFiles <= 0 {
		c.MaxFiles = DefaultMaxFiles
	}
	if c.QueueLen <= 0 {
		c.QueueLen = DefaultQueueLen
	}
	if c.FS == nil {
		c.FS = vfs.OS()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Log is an open audit log. A nil *Log records nothing, so callers need
// not check whether auditing is enabled.
type Log struct {
	cfg     Config
	q       chan Event
	stop    chan struct{}
	done    chan struct{}
	seq     atomic.Uint64
	dropped atomic.Uint64
	once    sync.Once

	// Owned by the writer goroutine.
	f        vfs.File
	size     int64
	reported uint64 // drops already reported
	failing  bool   // the last write failed (logged once per run of failures)
}

// Open opens (appending to) cfg.Path and starts the writer. With an empty
// Path it returns nil: a disabled log.
func Open(cfg Config) (*Log, error) {
	if cfg.Path == "" {
		return nil, nil
	}
	cfg = cfg.withDefaults()
	l := &Log{
		cfg: cfg, q: make(chan Event, cfg.QueueLen),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	if err := l.open(); err != nil {
		return nil, err
	}
	go l.run()
	return l, nil
}

// Record queues ev, stamping its sequence number and node. It never
// blocks: with the queue full, or the log closed, the event is dropped and
// counted.
func (l *Log) Record(ev Event) {
	if l == nil {
		return
	}
	ev.Seq = l.seq.Add(1)
	ev.Node = l.cfg.Node
	select {
	case <-l.stop:
		l.dropped.Add(1)
		return
	default:
	}
	select {
	case l.q <- ev:
	default:
		l.dropped.Add(1)
	}
}

// Dropped returns how many events were dropped so far.
func (l *Log) Dropped() uint64 {
	if l == nil {
		return 0
	}
	return l.dropped.Load()
}

// Close writes the queued events, stops the writer and closes the file.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.once.Do(func() { close(l.stop) })
	<-l.done
	return nil
}

func (l *Log) run() {
	defer close(l.done)
	for {
		select {
		case ev := <-l.q:
			l.write(ev)
		case <-l.stop:
			for {
				select {
				case ev := <-l.q:
					l.write(ev)
				default:
					l.closeFile()
					return
				}
			}
		}
	}
}

// write appends ev, first reporting drops not reported yet.
func (l *Log) write(ev Event) {
	if d := l.dropped.Load(); d > l.reported {
		l.reported = d
		l.writeLine(Event{
			Time: ev.Time, Node: l.cfg.Node, Type: EventsDropped, Result: ResultOK,
			Detail: map[string]string{"total": fmt.Sprint(d)},
		})
	}
	l.writeLine(ev)
}

func (l *Log) writeLine(ev Event) {
	line, err := json.Marshal(ev)
	if err != nil {
		l.fail(err)
		return
	}
	line = append(line, '\n')
	if l.f == nil || (l.size > 0 && l.size+int64(len(line)) > l.cfg.MaxFileBytes) {
		if err := l.rotate(); err != nil {
			l.fail(err)
			return
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	if err != nil {
		l.fail(err)
		return
	}
	l.failing = false
}

// fail counts the lost event and logs the first error of a run.
func (l *Log) fail(err error) {
	l.dropped.Add(1)
	l.reported++ // the loss is logged here, not as an event
	if !l.failing {
		l.cfg.Logger.Error("audit log write failed", "path", l.cfg.Path, "err", err)
	}
	l.failing = true
}

func (l *Log) open() error {
	f, err := l.cfg.FS.OpenFile(l.cfg.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit: %w", err)
	}
	l.f, l.size = f, size
	return nil
}

// rotate shifts Path.i to Path.i+1 (the oldest falls off the end), moves
// the live file to Path.1 and starts a new one.
func (l *Log) rotate() error {
	if l.f != nil {
		l.closeFile()
		p := l.cfg.Path
		if err := l.cfg.FS.Remove(fmt.Sprintf("%s.%d", p, l.cfg.MaxFiles)); err != nil && !vfs.IsNotExist(err) {
			return err
		}
		for i := l.cfg.MaxFiles - 1; i >= 1; i-- {
			err := l.cfg.FS.Rename(fmt.Sprintf("%s.%d", p, i), fmt.Sprintf("%s.%d", p, i+1))
			if err != nil && !vfs.IsNotExist(err) {
				return err
			}
		}
		if err := l.cfg.FS.Rename(p, p+".1"); err != nil && !vfs.IsNotExist(err) {
			return err
		}
	}
	return l.open()
}

// closeFile syncs and closes the live file: audit lines are not synced one
// by one, so a crash may lose the last few, but a rotation or a clean
// close loses none.
func (l *Log) closeFile() {
	if l.f == nil {
		return
	}
	l.f.Sync()
	l.f.Close()
	l.f = nil
}
