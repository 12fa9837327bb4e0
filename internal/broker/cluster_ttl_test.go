package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/retention"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// On three nodes, a record's expiry is stamped once, by the node that
// took the produce, and travels with it to the node writing the range and
// to the replicas: every node serves the same expiry, and none serves the
// record once it has passed.
func TestClusterTTLStampedOnceAndFilteredEverywhere(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := context.Background()
	createRetried(t, tc.nodes[0].b, "ttl", 1)
	for _, nd := range tc.nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("topic on node %d", nd.id), func() error { return hasTopics(nd.b, "ttl") })
	}
	ttl := func(v, ms string) broker.Record {
		r := broker.Record{Key: []byte("k"), Value: []byte(v)}
		if ms != "" {
			r.Headers = []segment.Header{{Key: []byte(retention.TTLHeader), Value: []byte(ms)}}
		}
		// A forged expiry, which no node may keep.
		r.Headers = append(r.Headers, segment.Header{Key: []byte(retention.ExpiryHeader), Value: []byte("1")})
		return r
	}
	before := time.Now().UnixMilli()
	// Every node takes a produce: whichever writes the range, the others
	// forward theirs to it.
	for i, nd := range tc.nodes {
		recs := []broker.Record{ttl("short-"+strconv.Itoa(i), "1"), ttl("long-"+strconv.Itoa(i), "3600000"), ttl("none-"+strconv.Itoa(i), "")}
		eventually(t, 10*time.Second, fmt.Sprintf("produce on node %d", nd.id), func() error {
			_, err := nd.b.Produce(ctx, "ttl", recs)
			return err
		})
	}
	// And a wire v2 batch on every node: stamped (re-encoded) by the node
	// that took it, then forwarded and replicated as stamped.
	for i, nd := range tc.nodes {
		recs := []broker.Record{ttl("v2short-"+strconv.Itoa(i), "1"), ttl("v2long-"+strconv.Itoa(i), "3600000"), ttl("v2none-"+strconv.Itoa(i), "")}
		eventually(t, 10*time.Second, fmt.Sprintf("produce a batch on node %d", nd.id), func() error {
			return produceBatch(ctx, nd.b, "ttl", recs)
		})
	}
	after := time.Now().UnixMilli()
	var expiries map[string]int64
	for _, nd := range tc.nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("node %d serves the unexpired records", nd.id), func() error {
			got, err := readTTL(ctx, nd.b)
			if err != nil {
				return err
			}
			if len(got) != 12 {
				return fmt.Errorf("%d records %v, want the 12 long and none ones", len(got), got)
			}
			if expiries == nil {
				expiries = got
			}
			for v, e := range got {
				if e != expiries[v] {
					return fmt.Errorf("record %s: expiry %d here, %d on another node", v, e, expiries[v])
				}
			}
			return nil
		})
	}
	for v, e := range expiries {
		switch {
		case strings.Contains(v, "none") && e != 0:
			t.Fatalf("%s: expiry %d, want none", v, e)
		case strings.Contains(v, "long") && (e < before+3600000 || e > after+3600000):
			t.Fatalf("%s: expiry %d, not the receiving node's clock + 1h (%d..%d)", v, e, before+3600000, after+3600000)
		}
	}
}

// readTTL reads topic "ttl" from the start on both wires and returns each
// record's value and expiry, checking that the two agree and that every
// record carries the expiry header it should.
func readTTL(ctx context.Context, b *broker.Broker) (map[string]int64, error) {
	out := map[string]int64{}
	var cur *string
	for {
		p, err := b.Fetch(ctx, broker.FetchRequest{Topic: "ttl", Cursor: cur, Max: 100})
		if err != nil {
			return nil, err
		}
		cur = p.Cursor
		if len(p.Records) == 0 {
			break
		}
		for _, r := range p.Records {
			for _, h := range r.Headers {
				if string(h.Key) == retention.ExpiryHeader {
					return nil, fmt.Errorf("record %s carries an expiry header %q", r.Value, h.Value)
				}
			}
			out[string(r.Value)] = r.Expiry
		}
	}
	bp, err := b.FetchBatches(ctx, broker.FetchBatchesRequest{FetchRequest: broker.FetchRequest{Topic: "ttl"}})
	if err != nil {
		return nil, err
	}
	n := 0
	for _, rb := range bp.Batches {
		recs, err := segment.DecodeRecords(rb.Batch, nil)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			n++
			if e, ok := out[string(r.Value)]; !ok || e != r.Expiry {
				return nil, fmt.Errorf("wire v2 serves %s (expiry %d), wire v1 did not", r.Value, r.Expiry)
			}
		}
	}
	if n != len(out) {
		return nil, fmt.Errorf("wire v2 served %d records, wire v1 %d", n, len(out))
	}
	return out, nil
}

// produceBatch sends recs as one wire v2 batch to the topic's one range.
func produceBatch(ctx context.Context, b *broker.Broker, topic string, recs []broker.Record) error {
	_, routes, err := b.Routes(topic)
	if err != nil {
		return err
	}
	if len(routes) != 1 {
		return fmt.Errorf("%d routes, want 1", len(routes))
	}
	batch, err := segment.EncodeBatch(nil, 0, recs, segment.CodecZstd)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	err = b.ProduceBatchesAsync(ctx, topic, []broker.RangeBatch{{Range: routes[0].Range, Batch: batch}}, func(_, _ int, err error) { done <- err })
	if err != nil {
		return err
	}
	return <-done
}
