package broker

// Power loss and disk faults through the whole node: metadata store,
// segment store and the broker's recovery together. After each simulated
// power loss (only fsynced bytes survive, and a random part of what was
// not, possibly torn) the node reopens and every acknowledged record must
// be readable exactly once, in per-key order.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

func openOn(t *testing.T, fs vfs.FS) *Broker {
	t.Helper()
	b, err := Open(context.Background(), Config{DataDir: "/data", FS: fs, SegmentMaxBytes: 2 << 10})
	if err != nil {
		t.Fatalf("open after power loss: %v", err)
	}
	return b
}

// powerLossSeeds is how many seeds TestPowerLossKeepsAcknowledgedRecords
// runs: 8 in the suite, more for a soak (go test -run TestPowerLoss
// ./internal/broker -powerloss.seeds=5000).
var powerLossSeeds = flag.Int("powerloss.seeds", 8, "seeds for the power-loss test")

func TestPowerLossKeepsAcknowledgedRecords(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*powerLossSeeds); seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			fs := vfs.NewMem()
			b := openOn(t, fs)
			ctx := context.Background()
			if err := b.CreateTopic(ctx, "pl", 8, 2); err != nil {
				t.Fatal(err)
			}
			acked := &ackLog{byKey: map[string][]int{}}
			next := map[string]int{}
			sent := map[string]map[int]bool{} // key -> values sent, acked or not
			for round := 0; round < 6; round++ {
				for i := 0; i < 1+rng.IntN(8); i++ {
					produceRound(t, b, "pl", 1+rng.IntN(20), next, acked)
					if rng.IntN(4) == 0 {
						if _, err := b.SplitRange(ctx, "pl", 0); err != nil {
							t.Fatal(err)
						}
					}
				}
				for k, seqs := range acked.byKey {
					for _, v := range seqs {
						addSent(sent, k, v)
					}
				}
				// Produces still in flight when the power goes: they may
				// or may not survive, but never partly or out of order.
				for i := 0; i < rng.IntN(4); i++ {
					key := fmt.Sprintf("key-%d", rng.IntN(20))
					v := next[key]
					next[key]++
					addSent(sent, key, v)
					rec := []Record{{Key: []byte(key), Value: []byte(strconv.Itoa(v))}}
					if err := b.ProduceAsync(ctx, "pl", rec, func(int, error) {}); err != nil {
						t.Fatal(err)
					}
				}
				// Power loss: the old process's memory is gone; only the
				// durable state (plus a random torn prefix) survives.
				fs = fs.PowerLoss(rng)
				b.Close()
				b = openOn(t, fs)
				r := newReader(t, b, "pl")
				r.drain()
				checkSurvivors(t, fmt.Sprintf("after power loss %d", round), r.seen, acked, sent)
				// What survived is acknowledged from now on.
				acked.byKey = map[string][]int{}
				for k, vs := range r.seen {
					acked.byKey[k] = append([]int(nil), vs...)
				}
			}
			b.Close()
		})
	}
}

// TestFsyncFailureAcknowledgesNothing makes fsync of segment files fail:
// the produce fails, nothing is acknowledged, the node reports not ready,
// and after a restart the records acknowledged before the fault are all
// there.
func TestFsyncFailureAcknowledgesNothing(t *testing.T) {
	mem := vfs.NewMem()
	faulty := vfs.NewFaulty(mem, nil)
	b, err := Open(context.Background(), Config{DataDir: "/data", FS: faulty})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "f", 8, 1); err != nil {
		t.Fatal(err)
	}
	acked := &ackLog{byKey: map[string][]int{}}
	next := map[string]int{}
	produceRound(t, b, "f", 5, next, acked)
	faulty.SetRule(vfs.FailOn(vfs.OpSync, "segments", nil))
	_, err = b.Produce(ctx, "f", []Record{{Key: []byte("key-0"), Value: []byte(strconv.Itoa(999))}})
	if !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("produce with failing fsync: %v", err)
	}
	if err := b.Ready(); err == nil {
		t.Fatal("node still ready after an fsync failure")
	}
	if _, err := b.Produce(ctx, "f", []Record{{Key: []byte("key-1"), Value: []byte("1000")}}); err == nil {
		t.Fatal("produce accepted after the store failed")
	}
	b.Close()
	b = openOn(t, mem.CrashClone())
	defer b.Close()
	r := newReader(t, b, "f")
	r.drain()
	r.check("after the fault and a restart", acked)
}

func addSent(sent map[string]map[int]bool, key string, v int) {
	if sent[key] == nil {
		sent[key] = map[int]bool{}
	}
	sent[key][v] = true
}

// checkSurvivors asserts every acknowledged record was read, each key's
// records are in increasing order without duplicates, and nothing was read
// that was never sent.
func checkSurvivors(t *testing.T, name string, seen map[string][]int, acked *ackLog, sent map[string]map[int]bool) {
	t.Helper()
	for k, vs := range seen {
		for i, v := range vs {
			if !sent[k][v] {
				t.Fatalf("%s: key %s read %d, which was never sent", name, k, v)
			}
			if i > 0 && v <= vs[i-1] {
				t.Fatalf("%s: key %s out of order or duplicated: %v", name, k, vs)
			}
		}
	}
	for k, want := range acked.byKey {
		got := map[int]bool{}
		for _, v := range seen[k] {
			got[v] = true
		}
		for _, v := range want {
			if !got[v] {
				t.Fatalf("%s: key %s lost acknowledged record %d (read %v)", name, k, v, seen[k])
			}
		}
	}
}

// TestKillThenPowerLossKeepsAcknowledgedRecords runs the shape a power-loss
// test on a live process misses: the process is killed (kill -9: the
// kernel keeps what it had written, synced or not) at a random point,
// sometimes right after a metadata command was written but its fsync
// failed; the node restarts on what the kill left, acknowledges more work
// built on it, and only then does the power go. Every record acknowledged
// before the kill or after the restart must survive, once, in key order.
// Seeds as for TestPowerLossKeepsAcknowledgedRecords (-powerloss.seeds).
func TestKillThenPowerLossKeepsAcknowledgedRecords(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*powerLossSeeds); seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			killThenPowerLoss(t, rand.New(rand.NewPCG(seed, seed^0x9e37)))
		})
	}
}

func killThenPowerLoss(t *testing.T, rng *rand.Rand) {
	ctx := context.Background()
	mem := vfs.NewMem()
	faulty := vfs.NewFaulty(mem, nil)
	b := openOn(t, faulty)
	if err := b.CreateTopic(ctx, "kp", 8, 2); err != nil {
		t.Fatal(err)
	}
	acked := &ackLog{byKey: map[string][]int{}}
	next := map[string]int{}
	sent := map[string]map[int]bool{}
	work := func(b *Broker) {
		for i := 0; i < 1+rng.IntN(6); i++ {
			produceRound(t, b, "kp", 1+rng.IntN(12), next, acked)
			if rng.IntN(5) == 0 {
				if _, err := b.SplitRange(ctx, "kp", 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		for k, seqs := range acked.byKey {
			for _, v := range seqs {
				addSent(sent, k, v)
			}
		}
	}
	for round := 0; round < 4; round++ {
		work(b)
		inFlight(t, b, rng, next, sent)
		key := fmt.Sprintf("key-%d", rng.IntN(12))
		lostOpen := rng.IntN(2) == 0
		if lostOpen {
			// An open_segment reaches the metadata log but not the disk:
			// the split leaves the key's new range without a segment, and
			// the produce that opens one fails at the log's fsync.
			groups, _, err := b.route("kp", []Record{rec(key, 0)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.SplitRange(ctx, "kp", groups[0].rangeID); err != nil {
				t.Fatal(err)
			}
			faulty.SetRule(vfs.FailOn(vfs.OpSync, "/meta/", nil))
			addSent(sent, key, next[key])
			_, _ = b.Produce(ctx, "kp", []Record{rec(key, next[key])})
			next[key]++
		}
		killed := mem.Clone() // kill -9
		b.Close()
		mem, faulty = killed, vfs.NewFaulty(killed, nil)
		b = openOn(t, faulty)
		if lostOpen && rng.IntN(2) == 0 {
			// Acknowledged with no metadata command after the restart:
			// nothing but the restart itself can make that open durable.
			produceKey(t, b, key, next, acked)
			addSent(sent, key, next[key]-1)
		} else {
			work(b) // acknowledged on top of what the kill left
			inFlight(t, b, rng, next, sent)
		}
		mem = mem.PowerLoss(rng)
		b.Close()
		faulty = vfs.NewFaulty(mem, nil)
		b = openOn(t, faulty)
		r := newReader(t, b, "kp")
		r.drain()
		checkSurvivors(t, fmt.Sprintf("round %d", round), r.seen, acked, sent)
		acked.byKey = map[string][]int{}
		for k, vs := range r.seen {
			acked.byKey[k] = append([]int(nil), vs...)
		}
	}
	b.Close()
}

// produceKey produces and acknowledges one record of key.
func produceKey(t *testing.T, b *Broker, key string, next map[string]int, acked *ackLog) {
	t.Helper()
	mustProduce(t, b, "kp", rec(key, next[key]))
	acked.add(key, []int{next[key]})
	next[key]++
}

// inFlight starts a few produces and does not wait for them: at a crash
// they may or may not survive, but never partly or out of order.
func inFlight(t *testing.T, b *Broker, rng *rand.Rand, next map[string]int, sent map[string]map[int]bool) {
	t.Helper()
	for i := 0; i < rng.IntN(4); i++ {
		key := fmt.Sprintf("key-%d", rng.IntN(12))
		addSent(sent, key, next[key])
		if err := b.ProduceAsync(context.Background(), "kp", []Record{rec(key, next[key])}, func(int, error) {}); err != nil {
			t.Fatal(err)
		}
		next[key]++
	}
}
