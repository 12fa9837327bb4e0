package e2e

// Self-healing under load, with real `malachi serve` processes on
// loopback at three nodes (segments of two replicas: with three on three
// nodes, a lost node's copies could never be placed again) and at five
// (three replicas). Small segments seal often. Before the kill a
// producer and a reader start, each through a node that survives: the
// producer sends one record at a time with a single attempt, so a record
// it was not told about may be stored once or not at all but never
// twice, and the reader follows the topic with a cursor. A node holding
// sealed copies is then killed for good with SIGKILL, past --dead-after.
// While both keep running, every sealed segment the killed node held
// must come back to its factor on live nodes, each copy verified against
// its seal by its own node's scrub (a node reports only its own copies'
// verdicts). After the heal: every acknowledged record reads back
// exactly once through every surviving node, each key's records in the
// order they were sent, and the running reader saw no record twice or
// out of order and no refusal that is not retriable. The producer never
// waits more than healLoadGap between two acknowledgements after the
// kill: an active segment the killed node followed is rolled onto live
// nodes once gossip declares it dead, so no range wedges on it.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// healLoadShape is one cluster the heal runs in.
type healLoadShape struct {
	name            string
	nodes, replicas int
}

var healLoadShapes = []healLoadShape{
	{"3 nodes, 2 replicas", 3, 2},
	{"5 nodes, 3 replicas", 5, 3},
}

const (
	// healLoadKeys is how many keys the producer spreads its records
	// over, in turn.
	healLoadKeys = 4
	// healLoadSealed is how many sealed segments the topic has before
	// the load starts.
	healLoadSealed = 6
	// healLoadMaxRecords bounds what the producer sends (and keeps).
	healLoadMaxRecords = 20_000
	// healLoadPace is the producer's pace: at most one record per tick,
	// about 25 KB/s, some six 4 KiB segments sealed a second.
	healLoadPace = 10 * time.Millisecond
	// healLoadMore is how many records the producer has acknowledged,
	// and the reader read, after the heal before both stop.
	healLoadMore = 20
	// healLoadScrub is the nodes' --scrub-interval: a copy the heal
	// placed is verified by its node's scrub within about a second.
	healLoadScrub = time.Second
	// healLoadDeadAfter is the nodes' --dead-after.
	healLoadDeadAfter = 2 * time.Second
	// healLoadGap bounds the producer's longest wait between two
	// acknowledgements once the victim is killed: gossip declaring it
	// dead (some 5 s), a produce caught meanwhile waiting out its commit
	// timeout (5 s), and the roll of the active segment off the dead
	// node. Measured at about 5.5 s; it was some 55 s when nothing
	// rolled an active segment off a dead follower.
	healLoadGap = 15 * time.Second
	// healLoadHealed bounds the heal of the victim's sealed copies after
	// the kill: dead detection, --dead-after, the copies and their scrub.
	// Measured at about 9 s at three nodes.
	healLoadHealed = 30 * time.Second
	// healLoadGoesOn bounds loadGoesOn: the producer acknowledged and
	// the reader read healLoadMore records, at a record per
	// healLoadPace, on a cluster that is not waiting out a failure.
	healLoadGoesOn = 15 * time.Second
)

// healLoadPad fills each value so that a 4 KiB segment seals after a
// dozen or so records.
var healLoadPad = strings.Repeat("x", 200)

// loadLog is what the producer sent and was told, per key: key i's
// values are "k<i>/<seq>|pad" with seq 0, 1, 2... in the order sent.
type loadLog struct {
	mu      sync.Mutex
	next    int                  // records sent, over all keys
	sent    [healLoadKeys]int    // records sent per key
	acked   [healLoadKeys][]int  // acknowledged sequences per key, increasing
	ackedAt [healLoadKeys][]bool // indexed by sequence
	failed  map[string]int       // failures by reason
	bad     []string             // failures with a reason that is not retriable
	lastAck time.Time
	gap     time.Duration // the longest wait from one acknowledgement to the next
	gapEnd  time.Time     // when that wait ended
	// gapAfter is the longest wait, since restartGap, from one
	// acknowledgement to the next; the wait running then counts.
	gapAfter time.Duration
}

// restartGap starts gapAfter afresh.
func (lg *loadLog) restartGap() {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	lg.gapAfter = 0
}

func newLoadLog() *loadLog { return &loadLog{failed: map[string]int{}} }

// produceOne sends the next record through cl with cl's attempts (one,
// for the producer) and records the answer. A produce cut short by ctx
// is recorded as sent and not acknowledged, and not judged.
func (lg *loadLog) produceOne(ctx context.Context, cl *client.Client, topic string) {
	lg.mu.Lock()
	k := lg.next % healLoadKeys
	seq := lg.sent[k]
	lg.next++
	lg.sent[k]++
	lg.ackedAt[k] = append(lg.ackedAt[k], false)
	lg.mu.Unlock()
	key := "k" + strconv.Itoa(k)
	val := key + "/" + strconv.Itoa(seq) + "|" + healLoadPad
	n, err := cl.Produce(ctx, topic, client.Record{Key: []byte(key), Value: []byte(val)})
	now := time.Now()
	lg.mu.Lock()
	defer lg.mu.Unlock()
	switch {
	case err == nil && n == 1:
		lg.acked[k] = append(lg.acked[k], seq)
		lg.ackedAt[k][seq] = true
		if gap := now.Sub(lg.lastAck); !lg.lastAck.IsZero() && gap > lg.gap {
			lg.gap, lg.gapEnd = gap, now
		}
		if gap := now.Sub(lg.lastAck); !lg.lastAck.IsZero() {
			lg.gapAfter = max(lg.gapAfter, gap)
		}
		lg.lastAck = now
	case ctx.Err() != nil:
	case err == nil:
		lg.bad = append(lg.bad, fmt.Sprintf("%s: %d of 1 record accepted, no error", val[:strings.IndexByte(val, '|')], n))
	default:
		lg.failed[reason(err)]++
		if !client.IsRetriable(err) && !errors.Is(err, client.ErrRequestTimeout) {
			lg.bad = append(lg.bad, fmt.Sprintf("%s/%d: %v", key, seq, err))
		}
	}
}

// run produces at healLoadPace until ctx ends or it sent
// healLoadMaxRecords.
func (lg *loadLog) run(ctx context.Context, cl *client.Client, topic string) {
	tick := time.NewTicker(healLoadPace)
	defer tick.Stop()
	for range healLoadMaxRecords {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lg.produceOne(ctx, cl, topic)
	}
}

func (lg *loadLog) ackedCount() int {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	n := 0
	for _, a := range lg.acked {
		n += len(a)
	}
	return n
}

// sentAndAcked answers whether key k's record seq was sent and whether
// it was acknowledged.
func (lg *loadLog) sentAndAcked(k, seq int) (sent, acked bool) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if seq < 0 || seq >= lg.sent[k] {
		return false, false
	}
	return true, lg.ackedAt[k][seq]
}

// parseLoadRecord reads a record of the producer: its key's index and
// its sequence; an error for a record it could not have sent.
func parseLoadRecord(r client.Record) (k, seq int, err error) {
	key, val := string(r.Key), string(r.Value)
	head, _, _ := strings.Cut(val, "|")
	vkey, num, ok := strings.Cut(head, "/")
	k, kerr := strconv.Atoi(strings.TrimPrefix(key, "k"))
	seq, serr := strconv.Atoi(num)
	if !ok || vkey != key || kerr != nil || serr != nil || k < 0 || k >= healLoadKeys {
		return 0, 0, fmt.Errorf("record %q under key %q was never sent", head, key)
	}
	return k, seq, nil
}

// keyedHistory checks recs, read in order: each record one the producer
// sent, each key's sequences increasing (no record twice, none out of
// order). It answers each key's sequences.
func keyedHistory(lg *loadLog, recs []client.Record) ([healLoadKeys][]int, error) {
	var byKey [healLoadKeys][]int
	for _, r := range recs {
		k, seq, err := parseLoadRecord(r)
		if err != nil {
			return byKey, err
		}
		if sent, _ := lg.sentAndAcked(k, seq); !sent {
			return byKey, fmt.Errorf("k%d/%d read, never sent", k, seq)
		}
		if s := byKey[k]; len(s) > 0 && s[len(s)-1] >= seq {
			return byKey, fmt.Errorf("k%d/%d read after k%d/%d", k, seq, k, s[len(s)-1])
		}
		byKey[k] = append(byKey[k], seq)
	}
	return byKey, nil
}

// missingAcked names the first acknowledged record of lg that byKey
// lacks, or "" when it holds them all.
func missingAcked(lg *loadLog, byKey [healLoadKeys][]int) string {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	for k := range healLoadKeys {
		have := byKey[k]
		for _, seq := range lg.acked[k] {
			if _, found := slices.BinarySearch(have, seq); !found {
				return fmt.Sprintf("k%d/%d (%d of key k%d's %d acknowledged records read)",
					k, seq, len(have), k, len(lg.acked[k]))
			}
		}
	}
	return ""
}

// loadReader follows a topic from its start with a cursor through one
// node, checking each page as it comes.
type loadReader struct {
	lg *loadLog

	mu       sync.Mutex
	recs     []client.Record // every record read, in order
	read     int
	refusals map[string]int // retriable failures by reason
	bad      []string       // failures that are not retriable; disorder
}

func newLoadReader(lg *loadLog) *loadReader {
	return &loadReader{lg: lg, refusals: map[string]int{}}
}

// run reads until ctx ends. Each fetch long-polls briefly at the end of
// the topic; a failure is recorded, then the read goes on from the same
// cursor after a short back-off.
func (rd *loadReader) run(ctx context.Context, cl *client.Client, topic string) {
	cursor := ""
	for {
		page, err := cl.Fetch(ctx, topic, client.FetchOptions{Cursor: cursor, Max: 1000, Wait: 200 * time.Millisecond})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			rd.refused(err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		rd.mu.Lock()
		rd.recs = append(rd.recs, page.Records...)
		rd.read = len(rd.recs)
		rd.mu.Unlock()
		if page.Cursor != "" {
			cursor = page.Cursor
		}
	}
}

func (rd *loadReader) refused(err error) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.refusals[reason(err)]++
	if !client.IsRetriable(err) {
		rd.bad = append(rd.bad, err.Error())
	}
}

func (rd *loadReader) count() int {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.read
}

// history is keyedHistory of what the reader read so far.
func (rd *loadReader) history() ([healLoadKeys][]int, error) {
	rd.mu.Lock()
	recs := slices.Clone(rd.recs)
	rd.mu.Unlock()
	return keyedHistory(rd.lg, recs)
}

// caughtUp is nil once the reader read every acknowledged record; a
// record it read twice, out of order or never sent fails the test.
func (rd *loadReader) caughtUp(t *testing.T) func() error {
	return func() error {
		byKey, err := rd.history()
		if err != nil {
			t.Fatalf("the reader: %v", err)
		}
		if m := missingAcked(rd.lg, byKey); m != "" {
			return errors.New("the reader has not read " + m)
		}
		return nil
	}
}

// healedCopies checks sealed segment s as node self describes it: its
// factor of replicas, none on victim, self's own copy verified by its
// scrub, every other copy on a live node and not found damaged.
func healedCopies(s client.SegmentInfo, self, victim string, factor int) error {
	if len(s.Replicas) != factor || slices.Contains(s.Replicas, victim) {
		return fmt.Errorf("segment %d has replicas %v", s.ID, s.Replicas)
	}
	if len(s.Copies) != len(s.Replicas) {
		return fmt.Errorf("segment %d has copies %v", s.ID, s.Copies)
	}
	for _, cp := range s.Copies {
		want := client.CopyUnchecked
		if cp.Node == self {
			want = client.CopyVerified
		}
		if cp.State != want {
			return fmt.Errorf("segment %d: the copy on %s is %s, want %s", s.ID, cp.Node, cp.State, want)
		}
	}
	return nil
}

// healedEverywhere is nil once, as each node of admins describes topic,
// each sealed segment of held (every sealed segment when held is nil)
// passes healedCopies.
func healedEverywhere(ctx context.Context, admins map[int]*client.Client, topic, victim string, factor int, held map[uint64]bool) func() error {
	return func() error {
		for _, id := range slices.Sorted(maps.Keys(admins)) {
			segs, err := sealedOf(ctx, admins[id], topic)
			if err != nil {
				return fmt.Errorf("node %d: %w", id, err)
			}
			n := 0
			for _, s := range segs {
				if held != nil && !held[s.ID] {
					continue
				}
				n++
				if err := healedCopies(s, "node-"+strconv.Itoa(id), victim, factor); err != nil {
					return fmt.Errorf("node %d: %w", id, err)
				}
			}
			if held != nil && n != len(held) {
				return fmt.Errorf("node %d lists %d of the %d sealed segments %s held", id, n, len(held), victim)
			}
		}
		return nil
	}
}

// preloadSealed produces through cl, one record at a time, until topic
// has healLoadSealed sealed segments.
func preloadSealed(t *testing.T, ctx context.Context, cl *client.Client, topic string, lg *loadLog) {
	t.Helper()
	for i := 1; ; i++ {
		lg.produceOne(ctx, cl, topic)
		if i%16 != 0 {
			continue
		}
		segs, err := sealedOf(ctx, cl, topic)
		if err == nil && len(segs) >= healLoadSealed {
			return
		}
		if i >= 2000 {
			t.Fatalf("%d records sent, %d sealed segments (%v), want %d", i, len(segs), err, healLoadSealed)
		}
	}
}

// pickVictim answers the node holding the most sealed copies of topic
// (ties to the higher id) and the sealed segments it holds, as cl's
// node describes them.
func pickVictim(t *testing.T, ctx context.Context, cl *client.Client, topic string, nodes int) (int, map[uint64]bool) {
	t.Helper()
	segs, err := sealedOf(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}
	victim, most := 0, 0
	for id := 1; id <= nodes; id++ {
		n := 0
		for _, s := range segs {
			if slices.Contains(s.Replicas, "node-"+strconv.Itoa(id)) {
				n++
			}
		}
		if n >= most {
			victim, most = id, n
		}
	}
	if most == 0 {
		t.Fatalf("no node holds any of the %d sealed segments", len(segs))
	}
	return victim, heldBy(segs, victim)
}

func heldBy(segs []client.SegmentInfo, id int) map[uint64]bool {
	held := map[uint64]bool{}
	for _, s := range segs {
		if slices.Contains(s.Replicas, "node-"+strconv.Itoa(id)) {
			held[s.ID] = true
		}
	}
	return held
}

// TestClusterHealsUnderLoad runs healUnderLoad in each shape of
// healLoadShapes, each on a cluster of its own.
func TestClusterHealsUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs clusters of real processes")
	}
	for _, sh := range healLoadShapes {
		t.Run(sh.name, func(t *testing.T) { healUnderLoad(t, sh) })
	}
}

// healUnderLoad is one shape's run; the file's opening says what it
// proves. Its log gives how long each phase took.
func healUnderLoad(t *testing.T, sh healLoadShape) {
	began := time.Now()
	c := startCluster(t, sh.nodes, "--replication-factor", strconv.Itoa(sh.nodes),
		"--segment-max-bytes", "4096", "--dead-after", healLoadDeadAfter.String(), "--heal-interval", "200ms",
		"--scrub-interval", healLoadScrub.String())
	formed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "healed-under-load"
	a1 := c.admin(ctx, 1)
	if err := a1.CreateTopic(ctx, topic, client.WithReplicas(sh.replicas)); err != nil {
		t.Fatal(err)
	}
	lg := newLoadLog()
	preloadSealed(t, ctx, c.dial(ctx, 1, "admin", "admin123", produceTimeout, 1), topic, lg)
	victim, held := pickVictim(t, ctx, a1, topic, sh.nodes)
	live := c.others(victim)
	admins := map[int]*client.Client{}
	for _, id := range live {
		admins[id] = c.admin(ctx, id)
	}
	prodVia, readVia := live[0], live[1]
	t.Logf("cluster formed in %s; %d records acknowledged; node %d holds %d sealed copies: producing through node %d, reading through node %d, then killing node %d",
		formed.Sub(began).Round(time.Millisecond), lg.ackedCount(), victim, len(held), prodVia, readVia, victim)

	prodCtx, stopProd := context.WithCancel(ctx)
	readCtx, stopRead := context.WithCancel(ctx)
	var prodWG, readWG sync.WaitGroup
	defer func() { stopProd(); stopRead(); prodWG.Wait(); readWG.Wait() }()
	rd := newLoadReader(lg)
	prodCl := c.dial(ctx, prodVia, "admin", "admin123", produceTimeout, 1)
	// The reader retries a refusal within a fetch, as a client would.
	readCl := c.dial(ctx, readVia, "admin", "admin123", produceTimeout, 5)
	prodWG.Go(func() { lg.run(prodCtx, prodCl, topic) })
	readWG.Go(func() { rd.run(readCtx, readCl, topic) })
	loadGoesOn(t, lg, rd, "before the kill")

	// The copies sealed since the victim was picked count too.
	segs, err := sealedOf(ctx, admins[prodVia], topic)
	if err != nil {
		t.Fatal(err)
	}
	held = heldBy(segs, victim)
	lg.restartGap()
	c.node(victim).kill()
	killed, killedAcked := time.Now(), lg.ackedCount()
	victimName := "node-" + strconv.Itoa(victim)
	took := within(t, healLoadHealed, fmt.Sprintf("the %d sealed segments %s held back at %d verified copies", len(held), victimName, sh.replicas),
		healedEverywhere(ctx, admins, topic, victimName, sh.replicas, held))
	t.Logf("%d segments healed and verified %s after the kill; %d records acknowledged meanwhile, %d read",
		len(held), took.Round(time.Millisecond), lg.ackedCount()-killedAcked, rd.count())
	took = loadGoesOn(t, lg, rd, "after the heal")
	t.Logf("%d more acknowledged and read within %s of the heal", healLoadMore, took.Round(time.Millisecond))

	stopProd()
	prodWG.Wait()
	within(t, 60*time.Second, "the reader reads every acknowledged record", rd.caughtUp(t))
	stopRead()
	readWG.Wait()
	checkLoad(t, lg, rd, killed)
	within(t, 60*time.Second, "every sealed segment at "+strconv.Itoa(sh.replicas)+" verified copies",
		healedEverywhere(ctx, admins, topic, victimName, sh.replicas, nil))
	for _, id := range live {
		readBackOnce(t, ctx, admins[id], id, topic, lg)
	}
	t.Logf("%d records acknowledged; %s in all", lg.ackedCount(), time.Since(began).Round(time.Millisecond))
}

// loadGoesOn waits until the producer has healLoadMore more records
// acknowledged and the reader healLoadMore more read, and answers how
// long that took. The bound holds because an active segment whose
// follower dies is rolled onto live nodes as soon as gossip declares it
// dead: with two replicas its primary could otherwise commit nothing
// until the segment filled with uncommitted appends.
func loadGoesOn(t *testing.T, lg *loadLog, rd *loadReader, when string) time.Duration {
	t.Helper()
	acked, read := lg.ackedCount(), rd.count()
	return within(t, healLoadGoesOn, "the producer and the reader go on "+when, func() error {
		if a, r := lg.ackedCount()-acked, rd.count()-read; a < healLoadMore || r < healLoadMore {
			return fmt.Errorf("%d acknowledged, %d read", a, r)
		}
		return nil
	})
}

// checkLoad fails the test on what the producer or the reader was told
// that is not retriable, or on the reader's disorder.
func checkLoad(t *testing.T, lg *loadLog, rd *loadReader, killed time.Time) {
	t.Helper()
	if _, err := rd.history(); err != nil {
		t.Errorf("the reader: %v", err)
	}
	lg.mu.Lock()
	t.Logf("producer failures: %v; its longest wait between two acknowledgements: %s, ended %s after the kill; since the kill: %s",
		lg.failed, lg.gap.Round(time.Millisecond), lg.gapEnd.Sub(killed).Round(time.Millisecond), lg.gapAfter.Round(time.Millisecond))
	if lg.gapAfter > healLoadGap {
		t.Errorf("the producer waited %s between two acknowledgements after the kill, want at most %s: a range wedged on the dead node",
			lg.gapAfter.Round(time.Millisecond), healLoadGap)
	}
	for _, b := range lg.bad {
		t.Errorf("the producer: %s", b)
	}
	lg.mu.Unlock()
	rd.mu.Lock()
	t.Logf("reader failures: %v", rd.refusals)
	for _, b := range rd.bad {
		t.Errorf("the reader: %s, not a retriable reason", b)
	}
	rd.mu.Unlock()
}

// readBackOnce reads topic from its start through node id until every
// acknowledged record is there; a record read twice, out of order or
// never sent fails the test at once.
func readBackOnce(t *testing.T, ctx context.Context, cl *client.Client, id int, topic string, lg *loadLog) {
	t.Helper()
	within(t, 60*time.Second, fmt.Sprintf("every acknowledged record through node %d", id), func() error {
		recs, err := readTopic(ctx, cl, topic)
		if err != nil {
			return err
		}
		byKey, err := keyedHistory(lg, recs)
		if err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
		if m := missingAcked(lg, byKey); m != "" {
			return fmt.Errorf("node %d has not read %s", id, m)
		}
		return nil
	})
}
