package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// Pushes of two topics' subscriptions, some closed with pushes queued,
// while fetchers of the other topic cycle the read pool: every pushed
// batch must pass its CRC and hold its own topic's records.
func TestSubscriptionPushesKeepTheirBytesAcrossTopics(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicExRequest{Topic: str("a"), Bits: 8, Ranges: 4})
	admin.ok(3, &wire.CreateTopicExRequest{Topic: str("b"), Bits: 8, Ranges: 4})
	ctx := context.Background()
	const perTopic = 2000
	base := map[string]int{"a": 0, "b": 100_000}
	for topic, first := range base {
		for k := 0; k < perTopic; k += 100 {
			recs := make([]broker.Record, 100)
			for i := range recs {
				j := first + k + i
				recs[i] = broker.Record{Key: []byte(strconv.Itoa(j)), Value: pooledValue(j, pooledSize(j))}
			}
			if _, err := n.b.Produce(ctx, topic, recs); err != nil {
				t.Fatal(err)
			}
		}
	}
	addr := n.s.Addr().String()
	const subs = 8
	errs := make([]error, subs+4)
	var wg sync.WaitGroup
	for s := range subs {
		topic := "a"
		if s%2 == 1 {
			topic = "b"
		}
		wg.Go(func() { errs[s] = subscribeAll(addr, topic, base[topic], perTopic, s%4 == 3) })
	}
	for r := range 4 {
		wg.Go(func() { errs[subs+r] = cycleTopicB(addr) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
	}
}

// subscribeAll subscribes to topic and checks pushes until it has every
// record, or, when leave is set, closes after two pushes with more queued.
func subscribeAll(addr, topic string, first, count int, leave bool) error {
	c, err := dialFetch(addr)
	if err != nil {
		return err
	}
	defer c.nc.Close()
	if err := c.send(7, &wire.SubscribeBatchesRequest{Topic: str(topic), Window: 10_000, MaxBytes: 16 << 10}); err != nil {
		return err
	}
	seen := map[int]bool{}
	for push := 0; len(seen) < count; push++ {
		if leave && push == 2 {
			return nil
		}
		payload, err := c.recv(7)
		if err != nil {
			return err
		}
		if _, err := checkAnswer(payload, seen); err != nil {
			return err
		}
		if !inRange(seen, first, first+count) {
			return fmt.Errorf("a push of %s held another topic's records", topic)
		}
	}
	return nil
}

// cycleTopicB reads topic b over and over in large pages to cycle the pool.
func cycleTopicB(addr string) error {
	c, err := dialFetch(addr)
	if err != nil {
		return err
	}
	defer c.nc.Close()
	for round := range 3 {
		seen := map[int]bool{}
		var cur *string
		for page := uint32(2); ; page++ {
			payload, err := c.call(page, &wire.FetchBatchesRequest{Topic: str("b"), Cursor: cur, MaxBytes: 256 << 10})
			if err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
			next, err := checkAnswer(payload, seen)
			if err != nil {
				return err
			}
			if next == nil || (cur != nil && *next == *cur) {
				break
			}
			cur = next
		}
	}
	return nil
}

// Over TLS the writer writes each piece through the TLS connection (no
// writev): fetch answers, some connections closed with answers queued,
// must keep their bytes while plaintext readers cycle the pool.
func TestTLSFetchAnswersKeepTheirBytes(t *testing.T) {
	ca := newTestCA(t, "test CA")
	n := startAuthNode(t, broker.Config{}, tlsFilesFor(t, ca, leaf{name: "node"}))
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicExRequest{Topic: str("b"), Bits: 8, Ranges: 4})
	ctx := context.Background()
	const total = 2000
	for k := 0; k < total; k += 100 {
		recs := make([]broker.Record, 100)
		for i := range recs {
			j := 100_000 + k + i
			recs[i] = broker.Record{Key: []byte(strconv.Itoa(j)), Value: pooledValue(j, pooledSize(j))}
		}
		if _, err := n.b.Produce(ctx, "b", recs); err != nil {
			t.Fatal(err)
		}
	}
	addr := n.s.Addr().String()
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Go(func() {
			if r%2 == 0 {
				errs[r] = cycleTopicB(addr)
				return
			}
			errs[r] = readTLS(addr, ca, r)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
	}
}

// readTLS reads topic b over TLS in pages of 64 to 256 KiB; every fourth
// reader closes with three answers queued.
func readTLS(addr string, ca *testCA, r int) error {
	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool()})
	if err != nil {
		return err
	}
	defer tc.Close()
	c := &fetchConn{nc: tc, br: bufio.NewReader(tc)}
	user, pass := "admin", "admin123"
	if _, err := c.call(1, &wire.AuthRequest{User: &user, Password: &pass}); err != nil {
		return err
	}
	seen := map[int]bool{}
	var cur *string
	for page := uint32(2); ; page++ {
		req := &wire.FetchBatchesRequest{Topic: str("b"), Cursor: cur, MaxBytes: uint32(64<<10) << (r % 3)}
		if r%4 == 3 && page == 6 {
			for k := range uint32(3) {
				if err := c.send(page+k, req); err != nil {
					return err
				}
			}
			return nil
		}
		payload, err := c.call(page, req)
		if err != nil {
			return err
		}
		next, err := checkAnswer(payload, seen)
		if err != nil {
			return err
		}
		if !inRange(seen, 100_000, 100_000+2000) {
			return fmt.Errorf("TLS reader %d got another topic's records", r)
		}
		if next == nil || (cur != nil && *next == *cur) {
			return nil
		}
		cur = next
	}
}
