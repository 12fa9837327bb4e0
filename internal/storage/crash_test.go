package storage

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
	"pgregory.net/rapid"
)

// crashModel drives a Store on a MemFS through random appends, reads,
// seals, power losses (with torn tails), process crashes and clean
// restarts, and checks the durability contract after every restart: per
// segment, what is read back is exactly the first k batches submitted,
// byte for byte, with k at least the number acknowledged before the crash.
// Nothing unsubmitted, no partial batch, nothing out of order.
type crashModel struct {
	t   *rapid.T
	mem *vfs.MemFS
	fs  *vfs.FaultyFS // over mem, to hold the commit goroutine inside an fsync
	st  *Store
	cfg Config

	mu    sync.Mutex
	gen   int                    // bumped at each restart; stale callbacks are ignored
	acked map[SegmentID]int      // batches acknowledged in this generation, a prefix
	fail  error                  // any callback error (none are expected)
	subs  map[SegmentID][][]byte // batches accepted by AppendAsync, in order
	next  map[SegmentID]uint64   // next free offset
	seals map[SegmentID]bool     // sealed (Seal returned)
	ids   []SegmentID
}

func (m *crashModel) open() {
	m.fs = vfs.NewFaulty(m.mem, nil)
	m.cfg.FS = m.fs
	st, err := Open(m.cfg)
	if err != nil {
		m.t.Fatalf("open: %v", err)
	}
	m.st = st
}

// appendBatches submits n batches to id from the calling goroutine.
func (m *crashModel) appendBatches(id SegmentID, n int, rng *rand.Rand) {
	for i := 0; i < n; i++ {
		m.mu.Lock()
		base := m.next[id] + uint64(rng.IntN(3)) // holes between batches
		gen := m.gen
		m.mu.Unlock()
		b, last := randomBatch(base, rng)
		err := m.st.AppendAsync(context.Background(), id, b, func(err error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.gen != gen {
				return
			}
			if err != nil && m.fail == nil {
				m.fail = err
			}
			m.acked[id]++
		})
		if err != nil {
			m.t.Fatalf("append to %d: %v", id, err)
		}
		m.mu.Lock()
		m.subs[id] = append(m.subs[id], b)
		m.next[id] = last + 1
		m.mu.Unlock()
	}
}

// randomBatch encodes 1-5 records from base with holes inside the batch.
func randomBatch(base uint64, rng *rand.Rand) ([]byte, uint64) {
	recs := make([]segment.Record, 1+rng.IntN(5))
	off := base
	for i := range recs {
		v := make([]byte, rng.IntN(200))
		for j := range v {
			v[j] = byte(off) + byte(j)
		}
		recs[i] = segment.Record{Offset: off, Timestamp: int64(off), Key: []byte{byte(i)}, Value: v}
		off += 1 + uint64(rng.IntN(2))
	}
	codec := segment.Codec(rng.IntN(3))
	b, err := segment.EncodeBatchAt(nil, recs, codec)
	if err != nil {
		panic(err)
	}
	return b, recs[len(recs)-1].Offset
}

// burst appends to every unsealed segment from its own goroutine at once.
func (m *crashModel) burst(seed uint64) {
	var wg sync.WaitGroup
	for i, id := range m.ids {
		if m.seals[id] {
			continue
		}
		wg.Add(1)
		go func(id SegmentID, rng *rand.Rand) {
			defer wg.Done()
			m.appendBatches(id, 1+rng.IntN(6), rng)
		}(id, rand.New(rand.NewPCG(seed, uint64(i))))
	}
	wg.Wait()
}

// checkRead checks a live read: a prefix of what was submitted, and
// durable — still there after a power loss taken right after the read.
func (m *crashModel) checkRead(id SegmentID) {
	buf, _, err := m.st.Read(id, 0, math.MaxInt, math.MaxUint64)
	if err != nil {
		m.t.Fatalf("read %d: %v", id, err)
	}
	m.mu.Lock()
	subs := m.subs[id]
	m.mu.Unlock()
	m.checkPrefix(id, buf, subs, 0)
	after, err := Open(Config{Dir: m.cfg.Dir, FS: m.mem.CrashClone()})
	if err != nil {
		m.t.Fatal(err)
	}
	defer after.Close()
	again, _, err := after.Read(id, 0, math.MaxInt, math.MaxUint64)
	if err != nil || !bytes.HasPrefix(again, buf) {
		m.t.Fatalf("segment %d: read returned bytes a power loss took back (%v)", id, err)
	}
}

// checkReadDuringSync holds the commit goroutine between writing a batch
// and fsyncing it, and reads meanwhile: the written-but-unsynced batch must
// not be returned.
func (m *crashModel) checkReadDuringSync(id SegmentID, seed uint64) {
	if m.seals[id] {
		m.checkRead(id)
		return
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	m.fs.SetRule(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && (strings.HasSuffix(name, ".log") || strings.HasSuffix(name, ".jnl")) {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return nil
	})
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		m.appendBatches(id, 1, rand.New(rand.NewPCG(seed, 2)))
	}()
	select {
	case <-entered:
		m.checkRead(id)
	case <-appended: // the append was refused; appendBatches reported it
	}
	m.fs.SetRule(nil)
	close(release)
	<-appended
}

// checkPrefix checks that buf is exactly subs[:k] for some k >= minK and
// returns k.
func (m *crashModel) checkPrefix(id SegmentID, buf []byte, subs [][]byte, minK int) int {
	parts, err := segment.SplitBatches(buf)
	if err != nil {
		m.t.Fatalf("segment %d: split: %v", id, err)
	}
	if len(parts) > len(subs) {
		m.t.Fatalf("segment %d: %d batches read, only %d submitted", id, len(parts), len(subs))
	}
	for i, p := range parts {
		if !bytes.Equal(p, subs[i]) {
			m.t.Fatalf("segment %d: batch %d differs from the one submitted", id, i)
		}
	}
	if len(parts) < minK {
		m.t.Fatalf("segment %d: %d batches survived, %d were acknowledged", id, len(parts), minK)
	}
	return len(parts)
}

// restart replaces the store with one opened on fs (what a crash left) and
// checks every segment against the acknowledgements counted before.
func (m *crashModel) restart(fs func() *vfs.MemFS, clean bool) {
	m.mu.Lock()
	acked := make(map[SegmentID]int, len(m.acked))
	for id, n := range m.acked {
		acked[id] = n
		if clean {
			acked[id] = len(m.subs[id]) // Close acknowledges everything queued
		}
	}
	m.mu.Unlock()
	next := fs() // taken after counting: everything counted is durable in it
	m.mu.Lock()
	m.gen++
	m.mu.Unlock()
	_ = m.st.Close() // drains into the old FS; its callbacks are stale now
	m.mem = next
	m.open()
	for _, id := range m.ids {
		buf, end, err := m.st.Read(id, 0, math.MaxInt, math.MaxUint64)
		if err != nil {
			m.t.Fatalf("read %d after restart: %v", id, err)
		}
		k := m.checkPrefix(id, buf, m.subs[id], acked[id])
		m.subs[id] = m.subs[id][:k]
		m.acked[id] = k
		if in, _ := m.st.Info(id); in.Sealed != m.seals[id] || in.Damage != nil {
			m.t.Fatalf("segment %d: info %+v, sealed %v", id, in, m.seals[id])
		}
		if k == 0 {
			end = 0
		}
		m.next[id] = end
	}
}

// sealOne seals the first unsealed segment, which waits for its appends.
func (m *crashModel) sealOne() {
	for _, id := range m.ids {
		if !m.seals[id] {
			if _, err := m.st.Seal(context.Background(), id); err != nil {
				m.t.Fatal(err)
			}
			m.seals[id] = true
			return
		}
	}
}

func TestCrashRecoveryProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		nseg := rapid.IntRange(1, 3).Draw(rt, "segments")
		m := &crashModel{t: rt, mem: vfs.NewMem(),
			acked: map[SegmentID]int{}, subs: map[SegmentID][][]byte{},
			next: map[SegmentID]uint64{}, seals: map[SegmentID]bool{}}
		// A tiny journal file size makes checkpoints (segment fsyncs and
		// journal deletions) race the appends, crashes and seals.
		m.cfg = Config{Dir: "/data", IndexIntervalBytes: 128,
			MaxPendingBytes:  rapid.SampledFrom([]int64{0, 600}).Draw(rt, "maxPending"),
			NoJournal:        rapid.IntRange(0, 3).Draw(rt, "journal") == 0,
			JournalFileBytes: rapid.SampledFrom([]int64{0, 700, 3000}).Draw(rt, "journalFile"),
		}
		// Preallocation writes JournalFileBytes of zeros: only small ones.
		m.cfg.JournalPrealloc = m.cfg.JournalFileBytes != 0 && rapid.Bool().Draw(rt, "prealloc")
		m.open()
		for i := 1; i <= nseg; i++ {
			id := SegmentID(i)
			if err := m.st.Create(id, 0); err != nil {
				rt.Fatal(err)
			}
			m.ids = append(m.ids, id)
		}
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			m.step(rt)
		}
		m.restart(func() *vfs.MemFS { return m.mem.PowerLoss(rand.New(rand.NewPCG(uint64(steps), 9))) }, false)
		_ = m.st.Close()
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.fail != nil {
			rt.Fatalf("a callback failed: %v", m.fail)
		}
	})
}

// cutOne cuts segment id back to a random batch boundary of what was
// submitted (Truncate waits for what is queued), and the model with it.
func (m *crashModel) cutOne(id SegmentID, rng *rand.Rand) {
	m.mu.Lock()
	subs := m.subs[id]
	m.mu.Unlock()
	k := rng.IntN(len(subs) + 1)
	end := uint64(0)
	if k > 0 {
		h, err := segment.ParseHeader(subs[k-1])
		if err != nil {
			m.t.Fatal(err)
		}
		end = h.LastOffset() + 1
	}
	if err := m.st.Truncate(context.Background(), id, end); err != nil {
		m.t.Fatalf("truncate %d to %d: %v", id, end, err)
	}
	m.mu.Lock()
	m.subs[id], m.next[id] = subs[:k], end
	m.acked[id] = min(m.acked[id], k)
	m.mu.Unlock()
}

func (m *crashModel) step(rt *rapid.T) {
	seed := rapid.Uint64().Draw(rt, "seed")
	rng := rand.New(rand.NewPCG(seed, 1))
	id := m.ids[rng.IntN(len(m.ids))]
	switch op := rapid.IntRange(0, 10).Draw(rt, "op"); {
	case op == 10:
		if !m.seals[id] {
			m.cutOne(id, rng)
		}
	case op <= 3:
		if !m.seals[id] {
			m.appendBatches(id, 1+rng.IntN(4), rng)
		}
	case op <= 5:
		m.burst(seed)
	case op == 6:
		m.checkReadDuringSync(id, seed)
	case op == 7:
		m.restart(func() *vfs.MemFS { return m.mem.PowerLoss(rng) }, false)
	case op == 8:
		m.restart(m.mem.Clone, false) // kill -9: the kernel keeps unsynced data
	default:
		if rng.IntN(4) == 0 {
			m.sealOne()
		} else {
			m.restart(func() *vfs.MemFS { _ = m.st.Close(); return m.mem }, true)
		}
	}
}
