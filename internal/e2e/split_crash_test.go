package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
)

// TestSplitAcrossSIGKILL produces keyed records continuously through a real
// node while its ranges split, kills the node with SIGKILL in the middle of
// the splitting, restarts it, splits again, and checks that a reader from
// the start sees every acknowledged record exactly once, every key in order.
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
	phase(p1, 3, true)

	p2 := startServe(t, dataDir, "--segment-max-bytes", "8192")
	phase(p2, 2, false)

	r := dial(t, p2.addr)
	r.auth("consumer", "consumer123")
	seen := map[string][]int{}
	var cur *string
	for corr := uint32(2); ; corr++ {
		r.write(frame(3, corr, fetchPayload("reshard", cur, nil, nil, 1000, 0)))
		page, c := readRecords(r.expectOK(corr))
		cur = c
		if len(page) == 0 {
			break
		}
		for _, rec := range page {
			v, _ := strconv.Atoi(rec.value)
			seen[*rec.key] = append(seen[*rec.key], v)
		}
	}
	total := 0
	for k, want := range acked {
		got := seen[k]
		// Unacknowledged records may survive the kill; acknowledged ones
		// must all be there, once, in order.
		i := 0
		for _, v := range got {
			if i < len(want) && v == want[i] {
				i++
			}
		}
		if i != len(want) {
			t.Fatalf("key %s: acknowledged %v, read %v", k, want, got)
		}
		for j := 1; j < len(got); j++ {
			if got[j] <= got[j-1] {
				t.Fatalf("key %s out of order or duplicated: %v", k, got)
			}
		}
		total += len(want)
	}
	t.Logf("%d acknowledged records checked after a SIGKILL during splitting", total)
}
