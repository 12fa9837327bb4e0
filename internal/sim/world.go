package sim

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/metadata"
)

// epoch is the unix ms the simulated clock starts at: metadata commands
// carry wall-clock-like times.
const epoch = 1_700_000_000_000

// Stats counts what a run did, so that a test can see the faults were
// exercised and not merely configured.
type Stats struct {
	Events                  int
	Acked, Maybe, Retried   int
	Refusals                map[string]int
	Crashes, PowerLosses    int
	Partitions, Outages     int
	Rolls, Failovers, Opens int
	DroppedMsgs, DupMsgs    int
	QueueFull               int
	CopiesBehind            int
	Reads, ReadRecords      int
	Records, SealedSegments int
	// Disk faults, permanent loss and repair.
	Flips, DiskFulls, FsyncFaults, Lost  int
	FailedCopies, SealsDeferred          int
	Scrubs, FoundDamaged, MarkedDamaged  int
	HealsStarted, HealsDone, HealsFailed int
	HealBytes, Drops, Collected          int
	Rebuilds, SetAside                   int
}

// Violation is a broken invariant, named by its id in
// cluster-invariants.md (or a short name for checks outside that list).
type Violation struct {
	Invariant string
	At        int64 // simulated ms
	Detail    string
}

func (v Violation) String() string { return fmt.Sprintf("%s at %dms: %s", v.Invariant, v.At, v.Detail) }

// Result is what a run returns: the digest of its trace (equal for equal
// seeds and configs), its counts, and every violation found.
type Result struct {
	Seed       uint64
	Digest     uint64
	Stats      Stats
	Violations []Violation
}

// Err is nil when no checker fired, else an error listing the violations.
func (r Result) Err() error {
	if len(r.Violations) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d violations:", len(r.Violations))
	for _, v := range r.Violations {
		b.WriteString("\n\t" + v.String())
	}
	return fmt.Errorf("%s", b.String())
}

// Violated reports whether a checker of invariant id fired.
func (r Result) Violated(id string) bool {
	for _, v := range r.Violations {
		if v.Invariant == id {
			return true
		}
	}
	return false
}

type event struct {
	at  int64
	seq uint64
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

// world is one run: every node, client, the network and the control
// plane, driven by one PRNG and one clock in one goroutine.
type world struct {
	cfg   Config
	rng   *rand.Rand
	now   int64
	seq   uint64
	queue eventQueue
	trace hash.Hash64
	buf   []byte

	nodes    []*node
	clients  []*producer
	cp       *controlPlane
	net      *network
	chk      *checker
	stats    Stats
	topicID  uint64
	ranges   []metadata.Range
	faultsOn bool
	stopping bool // producers send nothing new
}

// Run runs one simulation of cfg driven by seed and checks it. Equal
// seeds and configs give equal results, digest included.
func Run(seed uint64, cfg Config) Result {
	w, ok := newWorld(seed, cfg)
	if !ok {
		return w.result(seed)
	}
	w.start()
	w.loop(w.cfg.Duration)
	w.healAll()
	w.loop(w.cfg.Duration + w.cfg.Settle)
	w.finish()
	return w.result(seed)
}

// newWorld builds the cluster and its topic; ok is false when that
// failed (the result says why).
func newWorld(seed uint64, cfg Config) (*world, bool) {
	cfg = cfg.withDefaults()
	w := &world{cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), trace: fnv.New64a()}
	w.stats.Refusals = map[string]int{}
	w.chk = newChecker(w)
	if err := cfg.validate(); err != nil {
		w.chk.fail("config", "%v", err)
		return w, false
	}
	w.net = &network{w: w, cut: map[[2]uint64]bool{}}
	w.cp = &controlPlane{w: w, st: metadata.New(), up: true}
	for i := 1; i <= cfg.Nodes; i++ {
		w.nodes = append(w.nodes, newNode(w, uint64(i)))
	}
	return w, w.createTopic()
}

func (w *world) result(seed uint64) Result {
	return Result{Seed: seed, Digest: w.trace.Sum64(), Stats: w.stats, Violations: w.chk.violations}
}

func (w *world) createTopic() bool {
	res, err := w.cp.apply(0, metadata.Command{Kind: metadata.KindCreateTopic, Topic: "sim", Bits: 8,
		Ranges: w.cfg.Ranges, ReplicationFactor: w.cfg.Replicas})
	if err != nil {
		w.chk.fail("setup", "create_topic: %v", err)
		return false
	}
	w.topicID = res.TopicID
	w.ranges = w.cp.st.ActiveRanges(w.topicID)
	return true
}

// rangeOf is the active range a key routes to (ranges never split here).
func (w *world) rangeOf(key []byte) uint64 {
	r, _ := w.cp.st.ActiveRangeFor(w.topicID, keyspace.Position(key, 8))
	return r.ID
}

func (w *world) start() {
	for _, n := range w.nodes {
		w.tickLoop(n, n.inc)
		w.healLoop(n, n.inc)
	}
	for i := range w.cfg.Producers {
		p := newProducer(w, i)
		w.clients = append(w.clients, p)
		w.after(int64(i), p.next)
	}
	w.faultsOn = true
	w.after(w.faultGap(), w.fault)
	w.after(100, w.readLoop)
}

func (w *world) tickLoop(n *node, inc uint64) {
	w.after(w.cfg.TickEvery, func() {
		if n.inc != inc || !n.up {
			return
		}
		n.tick()
		w.tickLoop(n, inc)
	})
}

// after schedules fn delay ms from now. It refuses (and counts) an event
// past MaxEvents: the caller's message or timer is lost, which every
// protocol here already survives.
func (w *world) after(delay int64, fn func()) bool {
	if len(w.queue) >= w.cfg.MaxEvents {
		w.stats.QueueFull++
		return false
	}
	w.seq++
	heap.Push(&w.queue, &event{at: w.now + max(delay, 0), seq: w.seq, fn: fn})
	return true
}

func (w *world) loop(until int64) {
	for len(w.queue) > 0 && w.queue[0].at <= until {
		e := heap.Pop(&w.queue).(*event)
		w.now = e.at
		w.stats.Events++
		e.fn()
	}
	w.now = max(w.now, until)
}

// note adds a step to the trace digest.
func (w *world) note(kind byte, vals ...uint64) {
	w.buf = append(w.buf[:0], kind)
	w.buf = binary.AppendUvarint(w.buf, uint64(w.now))
	for _, v := range vals {
		w.buf = binary.AppendUvarint(w.buf, v)
	}
	w.trace.Write(w.buf)
	if traceOut != nil {
		fmt.Fprintf(traceOut, "%6d %c %v\n", w.now, kind, vals)
	}
}

// traceOut, when set (go test -sim.trace), gets every traced step as a
// line: the way to read what a failing seed did.
var traceOut io.Writer

func (w *world) unixNow() int64 { return epoch + w.now }

func (w *world) node(id uint64) *node {
	if id == 0 || id > uint64(len(w.nodes)) {
		return nil
	}
	return w.nodes[id-1]
}

func (w *world) between(lo, hi int64) int64 { return lo + w.rng.Int64N(hi-lo+1) }

func (w *world) chance(p float64) bool { return p > 0 && w.rng.Float64() < p }

// memberDead is what membership says: a node down for MemberDelay is
// declared dead. A partitioned node is not: only timeouts find it.
func (w *world) memberDead(id uint64) bool {
	n := w.node(id)
	return n == nil || !n.up && w.now-n.downAt >= w.cfg.MemberDelay
}

func nodeName(id uint64) string { return fmt.Sprintf("n%d", id) }

func nodeOfName(name string) uint64 {
	id, _ := strconv.ParseUint(strings.TrimPrefix(name, "n"), 10, 64)
	return id
}

func replicaIDs(seg metadata.Segment) []uint64 {
	ids := make([]uint64, 0, len(seg.Replicas))
	for _, r := range seg.Replicas {
		ids = append(ids, nodeOfName(r))
	}
	return ids
}
