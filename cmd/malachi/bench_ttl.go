package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/malachi-log/malachi/internal/bench"
	"github.com/malachi-log/malachi/pkg/client"
)

// ttlPrep is what `bench consume --prepare` writes before it reads: a
// fresh topic of --records records, each with a TTL of ttl (none when 0),
// of which the fraction expired carries a TTL of 1 ms instead, so that it
// has expired by the time the consumers read. The consumers then read
// what is left: the node reads every record and filters the expired ones.
type ttlPrep struct {
	prepare bool
	ttl     time.Duration
	expired float64
	// lookalike gives records without a TTL a header of the size a TTL
	// record carries (its malachi.ttl_ms), under a name the node does not
	// reserve: a control that reads nearly the same bytes without the
	// filter (a TTL record also holds its expiry, a varint of 6 bytes).
	lookalike bool
}

// prepareChunk is how many records one produce call of the preparation
// sends.
const prepareChunk = 1000

func (p ttlPrep) check(m bench.Mode) error {
	switch {
	case !p.prepare && (p.ttl != 0 || p.expired != 0):
		return usageErr("--ttl and --expired-fraction need --prepare")
	case p.prepare && m != bench.Consume:
		return usageErr("--prepare is an option of bench consume")
	case p.ttl < 0 || p.ttl > 0 && p.ttl < time.Millisecond:
		return usageErr("--ttl must be at least 1ms (0: no TTL)")
	case p.expired < 0 || p.expired >= 1:
		return usageErr("--expired-fraction must be in [0, 1)")
	case p.expired > 0 && p.ttl == 0:
		return usageErr("--expired-fraction needs --ttl")
	case p.lookalike && (!p.prepare || p.ttl != 0):
		return usageErr("--lookalike-headers needs --prepare and no --ttl")
	}
	return nil
}

// expiresNow says whether record i of the preparation gets the 1 ms TTL:
// the expired ones are spread evenly, so every page holds some.
func (p ttlPrep) expiresNow(i int64) bool {
	return int64(float64(i+1)*p.expired) > int64(float64(i)*p.expired)
}

// run writes the records and returns how many the consumers can read.
func (p ttlPrep) run(ctx context.Context, dial func(context.Context) (*client.Client, error), cfg bench.Config) (int64, error) {
	c, err := dial(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var opts []client.TopicOption
	if cfg.Ranges > 0 {
		opts = append(opts, client.WithRanges(cfg.Ranges))
	}
	if err := c.CreateTopic(ctx, cfg.Topic, opts...); err != nil {
		return 0, fmt.Errorf("--prepare needs a fresh topic: %w", err)
	}
	value := make([]byte, cfg.Size)
	x := uint32(2463534242)
	for i := range value {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		value[i] = byte(x)
	}
	long := []byte(strconv.FormatInt(p.ttl.Milliseconds(), 10))
	var left int64
	recs := make([]client.Record, 0, prepareChunk)
	for i := int64(0); i < cfg.Records; i++ {
		r := client.Record{Value: value}
		if cfg.Keys > 0 {
			r.Key = []byte("k" + strconv.FormatInt(i%int64(cfg.Keys), 10))
		}
		switch {
		case p.expiresNow(i):
			r.Headers = []client.Header{{Key: "malachi.ttl_ms", Value: []byte("1")}}
		case p.ttl > 0:
			r.Headers = []client.Header{{Key: "malachi.ttl_ms", Value: long}}
			left++
		case p.lookalike:
			r.Headers = []client.Header{{Key: "malachi_ttl_ms", Value: long}}
			left++
		default:
			left++
		}
		if recs = append(recs, r); len(recs) == prepareChunk || i == cfg.Records-1 {
			if _, err := c.Produce(ctx, cfg.Topic, recs...); err != nil {
				return 0, err
			}
			recs = recs[:0]
		}
	}
	// The 1 ms TTLs run on the node's clock from each produce: a little
	// wait makes sure the last ones have passed before the reads start.
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return left, nil
}
