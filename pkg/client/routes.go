package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/wire"
)

// routeTable is a topic's active ranges as topic_routes (wire v2) answered
// them: what a producer needs to build one batch per range. It is routing
// state only, never shown to users, and may be stale: the node re-routes
// a batch whose range split or merged, and says so (rerouted > 0), which
// makes the client ask again.
type routeTable struct {
	bits   uint8
	ranges []wire.RouteRange // ascending by Start
	// first[s] is the index of the first range ending past the start of
	// slot s, a block of the keyspace named by the top slotBits bits of a
	// position: a key's range lies in [first[s], first[s+1]], which with
	// a few slots per range is one range or two. first has a last entry,
	// len(ranges), past the last slot. Built for tables of more than a
	// few ranges only (nil: search them all).
	first    []uint32
	slotBits uint8
	// next spreads records without a key over the ranges, round-robin.
	next atomic.Uint64
}

func newRouteTable(resp *wire.TopicRoutesResponse) (*routeTable, error) {
	if len(resp.Ranges) == 0 {
		return nil, fmt.Errorf("%w: topic_routes answered no range", ErrProtocol)
	}
	rs := slices.Clone(resp.Ranges)
	slices.SortFunc(rs, func(a, b wire.RouteRange) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	t := &routeTable{bits: resp.Bits, ranges: rs}
	t.buildSlots()
	return t, nil
}

// maxSlotBits bounds the slot index at 2^16 + 1 entries (256 KiB).
const maxSlotBits = 16

// buildSlots builds t.first, with about four slots per range: a lookup then
// costs a shift and a step or two, not a binary search over every range.
func (t *routeTable) buildSlots() {
	n := len(t.ranges)
	bits := min(t.bits, 64)
	if n < 8 || bits == 0 {
		return
	}
	k := uint8(min(bits, maxSlotBits, uint8(bitsFor(n)+2)))
	shift := bits - k
	t.first = make([]uint32, 1<<k+1)
	i := 0
	for s := range 1 << k {
		start := uint64(s) << shift
		for i < n && t.ranges[i].End <= start {
			i++
		}
		t.first[s] = uint32(i)
	}
	t.first[1<<k] = uint32(n)
	t.slotBits = k
}

// bitsFor is the number of bits that count to n: ceil(log2(n)).
func bitsFor(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}

// index returns the index in t.ranges of the range that takes a record
// with key: the one whose [Start, End) holds the key's position, or for
// a nil key the next range in turn. An empty key is a key like any other.
func (t *routeTable) index(key []byte) int {
	if key == nil {
		return int((t.next.Add(1) - 1) % uint64(len(t.ranges)))
	}
	return t.indexPos(keyspace.Position(key, t.bits))
}

// indexPos is the index of the range holding position pos.
func (t *routeTable) indexPos(pos uint64) int {
	lo, hi := 0, len(t.ranges)
	if t.first != nil {
		s := pos >> (min(t.bits, 64) - t.slotBits)
		lo, hi = int(t.first[s]), int(t.first[s+1])
	}
	// The first range ending past pos (sort.Search over [lo, hi)): the
	// range at hi ends past the slot, hence past pos, when there is one.
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.ranges[m].End > pos {
			hi = m
		} else {
			lo = m + 1
		}
	}
	i := lo
	// Past the end only if the routes do not tile the keyspace, which a
	// node never answers; any range will do then, the node re-routes.
	return min(i, len(t.ranges)-1)
}

// routeCache holds the route tables of the topics a client produced to.
type routeCache struct {
	mu sync.Mutex
	m  map[string]*routeEntry
	// last is the entry found last, which a producer feeding one topic
	// asks for once per record: it saves that a lock and a map lookup.
	last atomic.Pointer[routeEntry]
}

type routeEntry struct {
	topic string
	// gone is set once the entry has left the map; last is then stale.
	gone  atomic.Bool
	ready chan struct{} // closed when the first lookup has ended
	table atomic.Pointer[routeTable]
	err   error // of the first lookup, once ready; the entry is then gone
	// refreshing is set while a refresh is under way (routeCache.mu).
	refreshing bool
}

// errNoV2 means the connection at hand does not speak wire v2: the caller
// falls back to wire v1.
var errNoV2 = errors.New("malachi: connection does not speak wire v2")

// routes returns topic's route table, asking the node on first use. Only
// one caller asks; the others wait for its answer. Failures are not
// cached.
func (c *Client) routes(ctx context.Context, topic string) (*routeTable, error) {
	// The common case, once per produced record: the routes are known.
	if e := c.rc.last.Load(); e != nil && e.topic == topic && !e.gone.Load() {
		if t := e.table.Load(); t != nil {
			return t, nil
		}
	}
	c.rc.mu.Lock()
	e := c.rc.m[topic]
	c.rc.mu.Unlock()
	if e != nil {
		if t := e.table.Load(); t != nil {
			c.rc.last.Store(e)
			return t, nil
		}
	}
	for {
		c.rc.mu.Lock()
		if c.rc.m == nil {
			c.rc.m = make(map[string]*routeEntry)
		}
		e := c.rc.m[topic]
		if e == nil {
			e = &routeEntry{topic: topic, ready: make(chan struct{})}
			c.rc.m[topic] = e
			c.rc.mu.Unlock()
			t, err := c.fetchRoutes(ctx, topic)
			c.rc.mu.Lock()
			if err != nil {
				e.err = err
				if c.rc.m[topic] == e {
					c.rc.dropLocked(e)
				}
			} else {
				e.table.Store(t)
			}
			c.rc.mu.Unlock()
			close(e.ready)
			return t, err
		}
		c.rc.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		if t := e.table.Load(); t != nil {
			return t, nil
		}
		// The lookup we waited for failed. If only its caller gave up,
		// ask again for ourselves.
		if !errors.Is(e.err, context.Canceled) && !errors.Is(e.err, context.DeadlineExceeded) || ctx.Err() != nil {
			return nil, e.err
		}
	}
}

// refreshRoutes asks the node for topic's routes again, in the
// background, because an answer showed they are stale. Produces go on
// with the old table meanwhile (the node re-routes what they send).
func (c *Client) refreshRoutes(topic string) {
	c.rc.mu.Lock()
	e := c.rc.m[topic]
	if e == nil || e.refreshing || e.table.Load() == nil {
		c.rc.mu.Unlock()
		return
	}
	e.refreshing = true
	c.rc.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.requestTimeout)
		defer cancel()
		t, err := c.fetchRoutes(ctx, topic)
		c.rc.mu.Lock()
		defer c.rc.mu.Unlock()
		e.refreshing = false
		switch {
		case err == nil:
			e.table.Store(t)
		case !IsRetriable(err) && c.rc.m[topic] == e:
			// The topic is gone (or we may no longer see it): the next
			// produce asks afresh and reports what the node says.
			c.rc.dropLocked(e)
		}
	}()
}

// forgetRoutes drops topic's routes (the topic was deleted).
func (c *Client) forgetRoutes(topic string) {
	c.rc.mu.Lock()
	if e := c.rc.m[topic]; e != nil {
		c.rc.dropLocked(e)
	}
	c.rc.mu.Unlock()
}

// dropLocked removes e from the cache.
func (rc *routeCache) dropLocked(e *routeEntry) {
	e.gone.Store(true)
	delete(rc.m, e.topic)
}

// fetchRoutes asks the node for topic's routes: errNoV2 if the connection
// does not speak wire v2.
func (c *Client) fetchRoutes(ctx context.Context, topic string) (*routeTable, error) {
	var resp wire.TopicRoutesResponse
	_, err := c.doPick(ctx, func(cn *conn) (request, error) {
		if !cn.v2 {
			return request{}, errNoV2
		}
		return request{req: wire.TopicRoutesRequest{Topic: str(topic)}, resp: &resp, resend: true}, nil
	})
	if err != nil {
		return nil, err
	}
	return newRouteTable(&resp)
}
