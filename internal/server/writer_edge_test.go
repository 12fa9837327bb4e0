package server

import (
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/wire"
)

// A client whose pipelined produce_batches wait for the request budget is
// not idle: it has sent the next frame and TCP holds back the rest. The
// reader's wait for the budget (the node's own backpressure, here while
// the disk is slow) must not count against IdleTimeout, which is about a
// client that sends nothing. Every produce must be answered once the disk
// catches up, however long the wait took.
func TestRequestBudgetWaitIsNotIdleness(t *testing.T) {
	const idle = time.Second
	g := newSyncGate()
	s := startGatedServer(t, Config{MaxConnRequestBytes: 64 << 10, IdleTimeout: idle}, g)
	c := dialClient(t, s)
	c.auth()
	c.createTopic(2, "t")
	var routes wire.TopicRoutesResponse
	c.request(3, &wire.TopicRoutesRequest{Topic: str("t")})
	if err := routes.Decode(c.answer(3)); err != nil {
		t.Fatal(err)
	}
	// Each frame is larger than the read-ahead, so its body is read from
	// the socket after the wait.
	batch, err := segment.EncodeBatch(nil, 0, []segment.Record{{Value: make([]byte, 100<<10), Timestamp: 1}}, segment.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	produce := func(corr uint32) *wire.ProduceBatchesRequest {
		return &wire.ProduceBatchesRequest{Topic: str("t"), Batches: []wire.RangeBatch{{Range: routes.Ranges[0].Range, Batch: batch}}}
	}
	c.request(4, produce(4)) // the range's segment exists from here on
	c.answer(4)

	const first, n = 10, 3
	var frames []byte
	for i := range n {
		frames = wire.AppendRequestFrame(frames, uint32(first+i), produce(uint32(first+i)))
	}
	sc := onlyConn(t, s)
	g.close()
	pipeline(t, c, frames)
	waitFor(t, "the reader to wait for the request budget", func() {}, func() bool {
		_, _, waiting := sc.requests.snapshot()
		return waiting == 1
	})
	// The idle deadline of the frame being read was set before its length
	// prefix arrived, so it has passed once idle has since the wait began.
	waiting := time.Now()
	waitFor(t, "the idle timeout to pass while the reader waits", func() {}, func() bool {
		return time.Since(waiting) > idle
	})
	g.release()
	for i := range n {
		var pr wire.ProduceBatchesResponse
		if err := pr.Decode(c.answer(uint32(first + i))); err != nil || pr.Count != 1 {
			t.Fatalf("produce %d: %+v %v", first+i, pr, err)
		}
	}
}

// WriteTimeout bounds one write to a client: a client that reads every
// answer, each well within the timeout, is served however many answers it
// has asked for. Gathering the queued answers into one vectored write puts
// several answers under one deadline, so a steady reader that takes a
// little more than half the timeout for each large answer is closed as
// if it had stopped reading.
func TestSteadyReaderOfLargeAnswersIsNotTimedOut(t *testing.T) {
	const (
		writeTimeout = 1500 * time.Millisecond
		perAnswer    = 900 * time.Millisecond // what the client takes for each answer
		answers      = 4
	)
	s := startServer(t, Config{WriteTimeout: writeTimeout, IdleTimeout: time.Minute})
	c := dialClient(t, s)
	askLargeAnswers(t, c, answers)
	for i := range answers {
		paused := time.Now()
		waitFor(t, "the client's pause between answers", func() {}, func() bool {
			return time.Since(paused) >= perAnswer
		})
		c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		body, err := wire.ReadFrame(c.br, 0, nil)
		if err != nil {
			t.Fatalf("answer %d of %d, each read within %v of the last (WriteTimeout %v): %v", i+1, answers, perAnswer, writeTimeout, err)
		}
		if _, code, _, err := wire.ParseResponse(body); err != nil || code != wire.CodeOK {
			t.Fatalf("answer %d: code %d, %v", i+1, code, err)
		}
	}
}

// askLargeAnswers stores one batch of 200 KiB in a new topic and pipelines
// n fetch_batches of it: each answer is far more than the socket buffers
// hold, so its write waits for the client to read it.
func askLargeAnswers(t *testing.T, c *client, n int) {
	t.Helper()
	c.auth()
	c.createTopic(2, "t")
	var routes wire.TopicRoutesResponse
	c.request(3, &wire.TopicRoutesRequest{Topic: str("t")})
	if err := routes.Decode(c.answer(3)); err != nil {
		t.Fatal(err)
	}
	batch, err := segment.EncodeBatch(nil, 0, []segment.Record{{Value: bigRecord(200 << 10), Timestamp: 1}}, segment.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	c.request(4, &wire.ProduceBatchesRequest{Topic: str("t"), Batches: []wire.RangeBatch{{Range: routes.Ranges[0].Range, Batch: batch}}})
	c.answer(4)
	var frames []byte
	for i := range n {
		frames = wire.AppendRequestFrame(frames, uint32(10+i), &wire.FetchBatchesRequest{Topic: str("t")})
	}
	if _, err := c.nc.Write(frames); err != nil {
		t.Fatal(err)
	}
}

// The other side of TestSteadyReaderOfLargeAnswersIsNotTimedOut: a client
// that asks for large answers and then reads nothing is still closed once
// a write has waited the write timeout, however the answers are gathered
// into writes.
func TestClientThatStopsReadingLargeAnswersIsClosed(t *testing.T) {
	s := startServer(t, Config{WriteTimeout: 200 * time.Millisecond, IdleTimeout: time.Minute})
	c := dialClient(t, s)
	askLargeAnswers(t, c, 8)
	waitFor(t, "the server to close the connection", func() {}, func() bool { return connCount(s) == 0 })
}
