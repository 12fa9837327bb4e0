package broker

import (
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/dataplane"
)

// The ends a node keeps of other nodes' ranges are bounded. A peer's
// "appended" notification naming 200,000 ranges of a topic no reader on
// this node waits on (and whose interest this node never registered) must
// not grow the table past the data path's bounds.
func TestDataNotificationOfUnwatchedRangesIsBounded(t *testing.T) {
	b := &Broker{}
	d := newDataPlane(b, nil, 1, DataLimits{}.withDefaults(time.Second))
	ends := make([]dataplane.End, 200_000)
	for i := range ends {
		ends[i] = dataplane.End{Topic: 7, Range: uint64(i + 1), End: 1}
	}
	d.serveOneWay(2, (&dataplane.Appended{Ends: ends}).Encode())
	d.mu.Lock()
	n := len(d.mu.ends)
	d.mu.Unlock()
	if n > d.lim.InterestEntries {
		t.Fatalf("one notification left %d range ends in the table (interest bound %d), for a topic nobody here waits on", n, d.lim.InterestEntries)
	}
}

// The ends of a topic this node registered interest in are kept, up to
// the table's bound; past it they are not.
func TestDataEndsOfRegisteredTopicsAreKeptUpToTheBound(t *testing.T) {
	b := &Broker{}
	d := newDataPlane(b, nil, 1, DataLimits{InterestEntries: 10}.withDefaults(time.Second))
	d.mu.Lock()
	d.mu.registered[7] = time.Now()
	d.mu.Unlock()
	ends := make([]dataplane.End, 25)
	for i := range ends {
		ends[i] = dataplane.End{Topic: 7, Range: uint64(i + 1), End: 5}
	}
	d.serveOneWay(2, (&dataplane.Appended{Ends: ends}).Encode())
	ends[0].End = 9
	d.serveOneWay(2, (&dataplane.Appended{Ends: ends[:1]}).Encode())
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := len(d.mu.ends); n != 10 {
		t.Fatalf("%d ends kept, want the bound, 10", n)
	}
	if got := d.mu.ends[1]; got != 9 {
		t.Fatalf("range 1 ends at %d in the table, was told 9", got)
	}
}

// An interest call naming a topic many times, or more topics than one
// call of this code ever names, is taken as its distinct first topics.
func TestInterestTopicsAreDistinctAndBounded(t *testing.T) {
	if got := distinctTopics([]uint64{3, 1, 3, 3, 2, 1}); !slices.Equal(got, []uint64{3, 1, 2}) {
		t.Fatalf("distinct topics: %v", got)
	}
	many := make([]uint64, 3*interestBatch)
	for i := range many {
		many[i] = uint64(i)
	}
	if got := distinctTopics(many); len(got) != interestBatch || got[0] != 0 || got[interestBatch-1] != interestBatch-1 {
		t.Fatalf("%d topics kept of %d, want the first %d", len(got), len(many), interestBatch)
	}
}

// Limits that do not fit the peer transport are refused at start-up: a
// read answer larger than a frame, forwarded bytes beyond its queue.
func TestDataLimitsMustFitThePeerTransport(t *testing.T) {
	if err := (DataLimits{}).withDefaults(time.Second).validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, lim := range []DataLimits{{ReadBytes: peerFrameBytes}, {ForwardBytes: peerQueueBytes}} {
		if err := lim.withDefaults(time.Second).validate(); err == nil {
			t.Errorf("%+v was accepted", lim)
		}
	}
}
