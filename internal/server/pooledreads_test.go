package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/wire"
)

// pooledValue is record i's value, of size bytes: its bytes say which
// record it is.
func pooledValue(i, size int) []byte {
	v := bytes.Repeat([]byte{byte(i), byte(i >> 8), byte(i*7 + 1)}, size/3+1)
	return v[:size]
}

// pooledSize varies record sizes so that batches both below and above the
// writer's copy thresholds (copyBelowPlain, copyBelowTLS) go out.
func pooledSize(i int) int { return 100 + (i*7919)%9000 }

// fetchConn is a connection the test drives from its own goroutines: it
// reports errors instead of failing the test.
type fetchConn struct {
	nc net.Conn
	br *bufio.Reader
}

func dialFetch(addr string) (*fetchConn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &fetchConn{nc: nc, br: bufio.NewReader(nc)}
	user, pass := "admin", "admin123"
	if _, err := c.call(1, &wire.AuthRequest{User: &user, Password: &pass}); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *fetchConn) send(corr uint32, req wire.Request) error {
	_, err := c.nc.Write(wire.AppendRequestFrame(nil, corr, req))
	return err
}

func (c *fetchConn) recv(corr uint32) ([]byte, error) {
	c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	body, err := wire.ReadFrame(c.br, 0, nil)
	if err != nil {
		return nil, err
	}
	got, code, payload, err := wire.ParseResponse(body)
	switch {
	case err != nil:
		return nil, err
	case got != corr:
		return nil, fmt.Errorf("answer to %d, want %d", got, corr)
	case code != wire.CodeOK:
		reason, _ := wire.DecodeError(payload)
		return nil, fmt.Errorf("refused: %s", reason)
	}
	return payload, nil
}

func (c *fetchConn) call(corr uint32, req wire.Request) ([]byte, error) {
	if err := c.send(corr, req); err != nil {
		return nil, err
	}
	return c.recv(corr)
}

// checkAnswer decodes a fetch_batches answer and checks every batch's CRC
// and every record's bytes; it adds the records' numbers to seen.
func checkAnswer(payload []byte, seen map[int]bool) (*string, error) {
	var fr wire.FetchBatchesResponse
	if err := fr.Decode(payload); err != nil {
		return nil, err
	}
	for _, rb := range fr.Batches {
		if err := segment.Verify(rb.Batch); err != nil {
			return nil, fmt.Errorf("range %d: a batch fails its check: %w", rb.Range, err)
		}
		recs, err := segment.DecodeRecords(rb.Batch, nil)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			i, err := strconv.Atoi(string(r.Key))
			if err != nil || !bytes.Equal(r.Value, pooledValue(i, pooledSize(i))) {
				return nil, fmt.Errorf("range %d offset %d holds another record's bytes (key %q)", rb.Range, r.Offset, r.Key)
			}
			seen[i] = true
		}
	}
	return fr.NextCursor, nil
}

// Fetch answers carry stored batches from pooled read buffers that go back
// to the pool once written. Many connections read the same topic at once,
// some closing with answers still queued or being written, some as long
// polls woken together by one append (which share one page) or closed
// while asleep; every record each reader gets must be its own bytes. With
// the race detector, released buffers are overwritten, so bytes sent after
// their buffer's release fail the CRC check here.
func TestFetchAnswersKeepTheirBytesAcrossConnections(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicExRequest{Topic: str("t"), Bits: 8, Ranges: 4})
	ctx := context.Background()
	total := 0
	produce := func(count int) {
		t.Helper()
		recs := make([]broker.Record, count)
		for i := range recs {
			k := total + i
			recs[i] = broker.Record{Key: []byte(strconv.Itoa(k)), Value: pooledValue(k, pooledSize(k))}
		}
		if _, err := n.b.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
		total += count
	}
	for range 30 {
		produce(100)
	}
	addr := n.s.Addr().String()

	// Readers of the whole topic, each with its own page size; every
	// third leaves after a few pages with three more fetches in flight.
	const readers = 12
	errs := make([]error, readers)
	var wg sync.WaitGroup
	for r := range readers {
		wg.Go(func() { errs[r] = readAll(addr, r, total) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("reader %d: %v", r, err)
		}
	}

	// Long polls at the end, woken together by appends.
	var end *string
	for corr := uint32(10); ; corr++ {
		var fr wire.FetchBatchesResponse
		if err := fr.Decode(admin.ok(corr, &wire.FetchBatchesRequest{Topic: str("t"), Cursor: end, MaxBytes: 1 << 20})); err != nil {
			t.Fatal(err)
		}
		end = fr.NextCursor
		if len(fr.Batches) == 0 {
			break
		}
	}
	for round := range 5 {
		const polls = 10
		conns := make([]*fetchConn, polls)
		for i := range conns {
			c, err := dialFetch(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.nc.Close()
			if err := c.send(2, &wire.FetchBatchesRequest{Topic: str("t"), Cursor: end, WaitMs: 60_000, MaxBytes: 64 << 10}); err != nil {
				t.Fatal(err)
			}
			conns[i] = c
		}
		conns[0].nc.Close() // a long poll cancelled while it sleeps
		from := total
		produce(20)
		errs := make([]error, polls)
		for i, c := range conns[1:] {
			wg.Go(func() {
				if i%4 == 3 {
					c.nc.Close() // closed while its answer is read or written
					return
				}
				payload, err := c.recv(2)
				if err != nil {
					errs[i] = err
					return
				}
				seen := map[int]bool{}
				if _, err := checkAnswer(payload, seen); err != nil {
					errs[i] = err
				} else if len(seen) == 0 || !inRange(seen, from, total) {
					errs[i] = fmt.Errorf("woken poll got records %v, want some of %d..%d", seen, from, total-1)
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, poll %d: %v", round, i, err)
			}
		}
		// The next round waits at the new end.
		var fr wire.FetchBatchesResponse
		for corr := uint32(100 + round*10); ; corr++ {
			if err := fr.Decode(admin.ok(corr, &wire.FetchBatchesRequest{Topic: str("t"), Cursor: end, MaxBytes: 1 << 20})); err != nil {
				t.Fatal(err)
			}
			end = fr.NextCursor
			if len(fr.Batches) == 0 {
				break
			}
		}
	}
}

func inRange(seen map[int]bool, from, to int) bool {
	for k := range seen {
		if k < from || k >= to {
			return false
		}
	}
	return true
}

// readAll reads the topic from the start on a connection of its own
// (reader r picks its page size) and checks every record; every third
// reader instead leaves after a few pages with fetches in flight.
func readAll(addr string, r, total int) error {
	c, err := dialFetch(addr)
	if err != nil {
		return err
	}
	defer c.nc.Close()
	maxBytes := uint32(8<<10) << (r % 7) // 8 KiB to 512 KiB
	seen := map[int]bool{}
	var cur *string
	for page := uint32(2); ; page++ {
		req := &wire.FetchBatchesRequest{Topic: str("t"), Cursor: cur, MaxBytes: maxBytes}
		if r%3 == 2 && page == 5 {
			for k := range uint32(3) {
				if err := c.send(page+k, req); err != nil {
					return err
				}
			}
			return nil // closed with three answers on their way
		}
		payload, err := c.call(page, req)
		if err != nil {
			return err
		}
		next, err := checkAnswer(payload, seen)
		if err != nil {
			return err
		}
		if len(seen) == total {
			return nil
		}
		if next == nil || (cur != nil && *next == *cur) {
			return errors.New("the cursor stopped before the end")
		}
		cur = next
	}
}
