package client_test

// Producer safety: the caller's buffers, the buffer's bounds, retries in
// order and calls made from promises. Each test runs against a real node
// (clienttest), with wire v1 and wire v2 where the paths differ.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// TestProducerReusedBuffer: a caller that reuses one buffer for every
// record stores each value as it was when produced, through the Producer
// and Client.Produce, with both wire versions; the promise's record holds
// the value as produced too.
func TestProducerReusedBuffer(t *testing.T) {
	for _, wv := range []int{1, 2} {
		t.Run(fmt.Sprintf("wire%d", wv), func(t *testing.T) {
			n, admin := start(t)
			createTopic(t, admin, "reuse")
			c := n.Client(t, "admin", "admin123", client.WithWireVersion(wv))
			p := client.NewProducer(c, client.ProducerOptions{Linger: time.Hour})
			buf := make([]byte, 8)
			key := make([]byte, 1)
			seen := make([]string, 5)
			for i := range 5 {
				copy(buf, fmt.Sprintf("value-%02d", i))
				key[0] = byte('a' + i)
				p.Produce(t.Context(), "reuse", client.Record{Key: key, Value: buf}, func(r client.Record, err error) {
					if err != nil {
						t.Errorf("record %d: %v", i, err)
					}
					seen[i] = string(r.Key) + "=" + string(r.Value)
				})
			}
			if err := p.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				copy(buf, fmt.Sprintf("value-%02d", 5+i))
				key[0] = byte('a' + 5 + i)
				produce(t, c, "reuse", client.Record{Key: key, Value: buf})
			}
			recs, _ := fetchN(t, admin, "reuse", "", 10)
			got := map[string]bool{}
			for _, r := range recs {
				got[string(r.Key)+"="+string(r.Value)] = true
			}
			for i := range 10 {
				want := fmt.Sprintf("%c=value-%02d", 'a'+i, i)
				if !got[want] {
					t.Errorf("stored records %v lack %s", got, want)
				}
				if i < 5 && seen[i] != want {
					t.Errorf("promise %d saw %s, want %s", i, seen[i], want)
				}
			}
		})
	}
}

// TestProducerBufferBytesBound: with MaxBufferedBytes, a record that would
// take the buffer past the bound waits; its Produce, given a context that
// is done, fails it with ErrBufferFull instead of buffering it. Once the
// buffer drains, the same record is taken.
func TestProducerBufferBytesBound(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "bound")
	p := client.NewProducer(c, client.ProducerOptions{Linger: time.Hour, MaxBufferedBytes: 1000})
	defer p.Close(t.Context())
	done, cancel := context.WithCancel(t.Context())
	cancel()
	var errs [4]error
	big := make([]byte, 400)
	for i := range 3 {
		ctx := t.Context()
		if i == 2 {
			ctx = done // the buffer holds 800 bytes: 400 more do not fit
		}
		p.Produce(ctx, "bound", client.Record{Value: big}, func(_ client.Record, err error) { errs[i] = err })
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], client.ErrBufferFull) || !errors.Is(errs[2], context.Canceled) {
		t.Fatalf("promises got %v, want nil, nil, ErrBufferFull wrapping context.Canceled", errs[:3])
	}
	p.Produce(done, "bound", client.Record{Value: big}, func(_ client.Record, err error) { errs[3] = err })
	if err := p.Flush(t.Context()); err != nil || errs[3] != nil {
		t.Fatalf("a record produced into the drained buffer: %v, flush %v", errs[3], err)
	}
	if _, cur := fetchN(t, c, "bound", "", 3); cur == "" {
		t.Fatal("no cursor")
	}
}

// TestProducerCallsFromPromise: Flush and Close called from a promise
// return ErrInPromise instead of waiting for the promise that called
// them; Produce called from a promise buffers its record when there is
// room, and fails it with ErrInPromise when there is none.
func TestProducerCallsFromPromise(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "reenter")
	p := client.NewProducer(c, client.ProducerOptions{MaxBufferedRecords: 2})
	var (
		mu                            sync.Mutex
		flushErr, closeErr            error
		roomErr, fullErr, chainedDone error
		calls                         int
	)
	record := client.Record{Value: []byte("v")}
	p.Produce(t.Context(), "reenter", record, func(_ client.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		flushErr = p.Flush(t.Context())
		closeErr = p.Close(t.Context())
		// This record is still counted: one more fits, a second does not.
		p.Produce(t.Context(), "reenter", record, func(_ client.Record, err error) { chainedDone = err })
		p.Produce(t.Context(), "reenter", record, func(_ client.Record, err error) { fullErr = err })
		roomErr = err
	})
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 || roomErr != nil || chainedDone != nil {
		t.Fatalf("promise ran %d times with %v; chained record %v", calls, roomErr, chainedDone)
	}
	if !errors.Is(flushErr, client.ErrInPromise) || !errors.Is(closeErr, client.ErrInPromise) || !errors.Is(fullErr, client.ErrInPromise) {
		t.Fatalf("from a promise: Flush %v, Close %v, Produce into a full buffer %v; want ErrInPromise", flushErr, closeErr, fullErr)
	}
	fetchN(t, c, "reenter", "", 2)
}

// TestProducerRetriesAcrossRestart: records produced while the node
// restarts are all stored, in order per key, and every promise reports
// success: batches whose answers were lost are sent again in order.
func TestProducerRetriesAcrossRestart(t *testing.T) {
	for _, wv := range []int{1, 2} {
		t.Run(fmt.Sprintf("wire%d", wv), func(t *testing.T) {
			n, admin := start(t)
			createTopic(t, admin, "restart", client.WithRanges(2))
			c := n.Client(t, "admin", "admin123", client.WithWireVersion(wv), client.WithRetry(50, 20*time.Millisecond))
			p := client.NewProducer(c, client.ProducerOptions{Linger: time.Millisecond})
			const total, keys = 2000, 4
			var (
				mu     sync.Mutex
				failed []error
				acked  int
			)
			restarted := false
			for i := range total {
				rec := client.Record{Key: fmt.Appendf(nil, "k%d", i%keys), Value: seqValue(i/keys, 16)}
				p.Produce(t.Context(), "restart", rec, func(_ client.Record, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed = append(failed, err)
					}
					acked++
				})
				if i == total/2 {
					n.Restart(t)
					restarted = true
				}
			}
			if err := p.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			if !restarted || len(failed) > 0 || acked != total {
				t.Fatalf("%d of %d promises ran, %d failed: %v", acked, total, len(failed), failed[:min(len(failed), 3)])
			}
			recs, _ := fetchAllV2(t, admin, "restart", "", 0)
			want := map[string]int{}
			for k := range keys {
				want[fmt.Sprintf("k%d", k)] = total / keys
			}
			checkPerKeyOrderDup(t, recs, want)
		})
	}
}

// checkPerKeyOrderDup checks that every key's records are stored in
// order, all of them, allowing a run of records to be stored again after
// a lost answer (at-least-once): each record's sequence number is at most
// one past the highest seen before it for its key.
func checkPerKeyOrderDup(t *testing.T, recs []client.Record, want map[string]int) {
	t.Helper()
	high := map[string]int{}
	for _, r := range recs {
		if len(r.Value) < 8 {
			t.Fatalf("value %q carries no sequence", r.Value)
		}
		seq := int(binary.BigEndian.Uint64(r.Value))
		k := string(r.Key)
		h, ok := high[k]
		if !ok {
			h = -1
		}
		if seq > h+1 {
			t.Fatalf("key %s: record %d stored after %d: a record is missing or out of order", k, seq, h)
		}
		high[k] = max(h, seq)
	}
	for k, n := range want {
		if high[k] != n-1 {
			t.Fatalf("key %s: highest record %d, want %d", k, high[k], n-1)
		}
	}
}
