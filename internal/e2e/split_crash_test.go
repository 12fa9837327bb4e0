package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
)

// TestSplitAcrossSIGKILL produces keyed records continuously through a real
// node while its ranges split, kills the node with SIGKILL in the middle of
// the splitting, restarts it and splits again. Three readers — one from the
// start, one holding a cursor taken before the crash, one a group that
// committed before it — each see every acknowledged record exactly once,
// every key in order.
func TestSplitAcrossSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	dataDir := t.TempDir()
	acked := map[string][]int{}
	next := map[string]int{}
	var mu sync.Mutex

	// phase produces through p while a second connection splits; it kills
	// p after the given number of splits when kill is set.
	phase := func(p *serveProcess, splits int, kill bool) {
		prod := dial(t, p.addr)
		prod.auth("app", "app123")
		admin := dial(t, p.addr)
		admin.auth("admin", "admin123")
		sent := map[uint32]map[string][]int{}
		done := make(chan struct{})
		signal := make(chan struct{}, 1)
		go func() {
			defer close(done)
			for {
				corr, code, err := readResponse(prod)
				if err != nil {
					return
				}
				mu.Lock()
				if code == 0 {
					for k, s := range sent[corr] {
						acked[k] = append(acked[k], s...)
					}
				}
				delete(sent, corr)
				mu.Unlock()
				select {
				case signal <- struct{}{}:
				default:
				}
			}
		}()
		split := 0
		for corr := uint32(10); ; corr++ {
			var recs []rawRecord
			batch := map[string][]int{}
			mu.Lock()
			for i := 0; i < 16; i++ {
				key := fmt.Sprintf("k%d", (int(corr)*16+i)%64)
				seq := next[key]
				next[key]++
				recs = append(recs, rawRecord{key: sp(key), value: strconv.Itoa(seq)})
				batch[key] = append(batch[key], seq)
			}
			sent[corr] = batch
			inflight := len(sent)
			mu.Unlock()
			if _, err := prod.nc.Write(frame(2, corr, producePayload("reshard", recs))); err != nil {
				break
			}
			if inflight > 8 {
				select {
				case <-signal:
				case <-done:
				}
			}
			if corr%40 == 0 {
				if split == splits {
					if kill {
						p.kill()
						break
					}
					break
				}
				var e enc
				e.str("reshard")
				e.u64(0)
				admin.write(frame(68, corr, e.Bytes()))
				admin.expectOK(corr)
				split++
			}
		}
		if !kill {
			prod.nc.Close()
		}
		<-done
	}

	p1 := startServe(t, dataDir, "--segment-max-bytes", "8192")
	setup := dial(t, p1.addr)
	setup.auth("admin", "admin123")
	setup.write(frame(1, 1, createTopicPayload("reshard", 8)))
	setup.expectOK(1)
	phase(p1, 2, false)
	// Two readers start before the crash: one keeps a cursor, one is a
	// group committing after every page.
	midway := &rawReader{t: t, seen: map[string][]int{}}
	midway.drain(dial(t, p1.addr))
	grouped := &rawReader{t: t, seen: map[string][]int{}, group: sp("billing")}
	grouped.drain(dial(t, p1.addr))
	phase(p1, 3, true) // SIGKILL in the middle of splitting

	p2 := startServe(t, dataDir, "--segment-max-bytes", "8192")
	phase(p2, 2, false)

	fromStart := &rawReader{t: t, seen: map[string][]int{}}
	for _, r := range []*rawReader{fromStart, midway, grouped} {
		r.drain(dial(t, p2.addr))
	}
	total := 0
	for k, want := range acked {
		for name, r := range map[string]*rawReader{"from start": fromStart, "midway": midway, "group": grouped} {
			checkAcked(t, name, k, want, r.seen[k])
		}
		total += len(want)
	}
	t.Logf("%d acknowledged records checked by three readers across a SIGKILL during splitting", total)
}

// rawReader reads a topic page by page over the raw protocol: with a
// cursor it keeps, or as a group committing after every page.
type rawReader struct {
	t      *testing.T
	cursor *string
	group  *string
	seen   map[string][]int
	corr   uint32
}

// drain reads until a page is empty, keeping records per key. A group
// commits each page before it reads on, so nothing it read is delivered
// to it twice, even across the crash.
func (r *rawReader) drain(c *rawConn) {
	r.t.Helper()
	c.auth("consumer", "consumer123")
	for {
		r.corr++
		if r.group != nil {
			c.write(frame(3, r.corr, fetchPayload("reshard", nil, r.group, nil, 1000, 0)))
		} else {
			c.write(frame(3, r.corr, fetchPayload("reshard", r.cursor, nil, nil, 1000, 0)))
		}
		page, next := readRecords(c.expectOK(r.corr))
		r.cursor = next
		for _, rec := range page {
			v, _ := strconv.Atoi(rec.value)
			r.seen[*rec.key] = append(r.seen[*rec.key], v)
		}
		if r.group != nil && len(page) > 0 {
			var e enc
			e.str("reshard")
			e.opt(r.group)
			e.opt(next)
			r.corr++
			c.write(frame(4, r.corr, e.Bytes()))
			c.expectOK(r.corr)
		}
		if len(page) == 0 {
			c.nc.Close()
			return
		}
	}
}

// checkAcked asserts a reader saw every acknowledged record of a key once,
// in order; records that were sent but never acknowledged may appear (they
// were durable when the node died), in order too.
func checkAcked(t *testing.T, name, key string, want, got []int) {
	t.Helper()
	i := 0
	for _, v := range got {
		if i < len(want) && v == want[i] {
			i++
		}
	}
	if i != len(want) {
		t.Fatalf("%s: key %s: acknowledged %v, read %v", name, key, want, got)
	}
	for j := 1; j < len(got); j++ {
		if got[j] <= got[j-1] {
			t.Fatalf("%s: key %s out of order or duplicated: %v", name, key, got)
		}
	}
}
