package server

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// fixedBuffers sets both socket buffers to n bytes, which also turns off
// the kernel's autotuning: a client that does not read then stalls the
// server's writer after about 2n bytes, however the host is tuned.
func fixedBuffers(n int) func(_, _ string, rc syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n); serr == nil {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, n)
			}
		})
		return errors.Join(err, serr)
	}
}

// fixedListener sets the send buffer of each accepted socket, which is not
// inherited from the listener.
type fixedListener struct {
	net.Listener
	n int
}

func (l fixedListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetWriteBuffer(l.n)
	}
	return nc, err
}

// dialPlain connects with the kernel's default socket buffers.
func dialPlain(t *testing.T, s *Server) *client {
	t.Helper()
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, br: bufio.NewReaderSize(nc, 1<<20)}
}

// bigRecord is a value of n bytes that is not all one byte.
func bigRecord(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(i * 7)
	}
	return v
}

// anyAnswer reads one frame of up to limit bytes (into buf if it has
// room) and checks it is an ok answer to a correlation id in pending,
// which it removes: answers to pipelined requests may come in any order.
func (c *client) anyAnswer(pending map[uint32]bool, limit uint32, buf []byte) (corr uint32, payload, body []byte) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	body, err := wire.ReadFrame(c.br, limit, buf)
	if err != nil {
		c.t.Fatalf("waiting for an answer: %v", err)
	}
	corr, code, payload, err := wire.ParseResponse(body)
	if err != nil || code != wire.CodeOK || !pending[corr] {
		reason, _ := wire.DecodeError(payload)
		c.t.Fatalf("answer %d code %d %q (%v): not an ok answer to a pending request", corr, code, reason, err)
	}
	delete(pending, corr)
	return corr, payload, body
}

// pendingRange is the set of correlation ids [first, first+n).
func pendingRange(first uint32, n int) map[uint32]bool {
	m := make(map[uint32]bool, n)
	for i := range n {
		m[first+uint32(i)] = true
	}
	return m
}

// TestFetchBudgetBoundsHeldBytes stores one 16 MiB record and pipelines
// 256 fetches of it (max 1) without reading: without a byte budget every
// fetch reads the record and queues a 16 MiB answer, about 8 GiB held for
// one connection (1 MiB records and a 4 MiB budget under the race
// detector). The bytes the connection holds — answers waiting for
// the writer and room reserved by running fetches — must stay within its
// budget plus one answer, and so must the live heap; once the client
// reads, every fetch is answered with the whole record.
func TestFetchBudgetBoundsHeldBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 4 GiB over loopback")
	}
	recordSize, budget := 16<<20, int64(0) // the default budget, 64 MiB
	if raceEnabled {
		// A sixteenth of everything: still 64 times the budget in flight.
		recordSize, budget = 1<<20, 4<<20
	}
	cfg := Config{MaxFrame: uint32(recordSize) + 1<<20, MaxConnBytes: budget, WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
	const sockBuf = 256 << 10
	lc := net.ListenConfig{Control: fixedBuffers(sockBuf)}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := serveOn(t, cfg, fixedListener{ln, sockBuf})
	value := bigRecord(recordSize)
	topic := "big"

	p := dialPlain(t, s)
	p.auth()
	p.createTopic(2, topic)
	p.request(3, &wire.ProduceRequest{Topic: &topic, Records: []wire.Record{{Key: []byte("k"), Value: value}}})
	p.answer(3)
	p.nc.Close()
	waitFor(t, "the producer's connection to end", func() {}, func() bool { return connCount(s) == 0 })

	d := net.Dialer{Control: fixedBuffers(sockBuf)}
	nc, err := d.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &client{t: t, nc: nc, br: bufio.NewReaderSize(nc, 1<<20)}
	c.auth()
	sc := onlyConn(t, s)
	const fetches, first = 256, 2
	var frames []byte
	for i := range fetches {
		frames = wire.AppendRequestFrame(frames, first+uint32(i), &wire.FetchRequest{Topic: &topic, Max: 1})
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	admittedBefore := sc.admitted.Load()
	if _, err := c.nc.Write(frames); err != nil {
		t.Fatal(err)
	}

	answer := int64(recordSize + 1<<10) // the record, its framing and the cursor
	limit := s.cfg.MaxConnBytes
	check := func() {
		if _, peak, _ := sc.budget.snapshot(); peak > limit+answer {
			t.Fatalf("the connection held %d bytes; budget %d plus one answer", peak, limit)
		}
	}
	// Settled: every fetch was admitted, the writer is stuck in a write
	// the client does not read, and every fetch without a queued answer is
	// waiting for room (none is reading the record).
	waitFor(t, "the fetches to settle", check, func() bool {
		_, _, waiting := sc.budget.snapshot()
		return sc.admitted.Load()-admittedBefore == fetches && sc.writing.Load() && int(sc.owed.Load()) == waiting
	})
	held, peak, waiting := sc.budget.snapshot()
	t.Logf("held %d MiB (peak %d MiB) of a %d MiB budget; %d fetches waiting", held>>20, peak>>20, limit>>20, waiting)
	if waiting < fetches-int(limit/answer)-1 {
		t.Fatalf("only %d of %d fetches wait for room", waiting, fetches)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > limit+answer+32<<20 {
		t.Fatalf("the live heap grew by %d MiB", grew>>20)
	}

	// The client reads: every fetch gets the whole record.
	var buf []byte
	pending := pendingRange(first, fetches)
	for range fetches {
		corr, payload, body := c.anyAnswer(pending, uint32(2*recordSize), buf)
		var fr wire.FetchResponse
		if err := fr.Decode(payload); err != nil {
			t.Fatal(err)
		}
		if len(fr.Records) != 1 || !bytes.Equal(fr.Records[0].Value, value) {
			t.Fatalf("fetch %d: %d records, or the record differs", corr, len(fr.Records))
		}
		buf = body[:0]
		check()
	}
	waitFor(t, "the budget to empty", check, func() bool { held, _, _ := sc.budget.snapshot(); return held == 0 })
}

// TestAnswerLargerThanBudgetIsSentWhole: a record larger than the whole
// budget is still fetched, alone: two pipelined fetches of it run one
// after the other and both answer the whole record.
func TestAnswerLargerThanBudgetIsSentWhole(t *testing.T) {
	const recordSize = 3 << 20
	cfg := Config{MaxFrame: 4 << 20, MaxConnBytes: 1 << 20}
	s := serveOn(t, cfg, loopbackListener(t))
	value := bigRecord(recordSize)
	topic := "big"
	c := dialPlain(t, s)
	c.auth()
	c.createTopic(2, topic)
	c.request(3, &wire.ProduceRequest{Topic: &topic, Records: []wire.Record{{Value: value}}})
	c.answer(3)
	sc := onlyConn(t, s)
	for corr := uint32(4); corr < 6; corr++ {
		c.request(corr, &wire.FetchRequest{Topic: &topic, Max: 10})
	}
	pending := pendingRange(4, 2)
	for range 2 {
		corr, payload, _ := c.anyAnswer(pending, 2*recordSize, nil)
		var fr wire.FetchResponse
		if err := fr.Decode(payload); err != nil || len(fr.Records) != 1 || !bytes.Equal(fr.Records[0].Value, value) {
			t.Fatalf("fetch %d: %d records (%v), or the record differs", corr, len(fr.Records), err)
		}
	}
	// One at a time: never two reservations, nor a reservation and an
	// answer, at once.
	if _, peak, _ := sc.budget.snapshot(); peak > max(s.fetchReserve, recordSize+1<<10) {
		t.Fatalf("peak %d: the fetches overlapped", peak)
	}
}

// TestReadBufferShrinksAfterLargeFrame: buffers follow the traffic. After
// a 4 MiB frame, and a small one after it, the idle connection holds no
// read buffer, no frame buffer and no writer (with its write buffer).
func TestReadBufferShrinksAfterLargeFrame(t *testing.T) {
	s := serveOn(t, Config{}, loopbackListener(t))
	topic := "t"
	c := dialPlain(t, s)
	c.auth()
	c.createTopic(2, topic)
	sc := onlyConn(t, s)
	c.request(3, &wire.ProduceRequest{Topic: &topic, Records: []wire.Record{{Value: bigRecord(4 << 20)}}})
	c.answer(3)
	c.request(4, &wire.StatusRequest{})
	c.answer(4)
	waitFor(t, "the writer to end", func() {}, func() bool { return sc.goroutines.Load() == 0 })
	if got := sc.readHeld.Load(); got != 0 {
		t.Fatalf("the idle reader holds %d bytes of buffer", got)
	}
}

// TestUnauthenticatedConnectionsAreCheap: a connection that has not
// authenticated holds no buffers while it waits, and a small read-ahead
// while it sends; full-size read-ahead comes with authentication.
func TestUnauthenticatedConnectionsAreCheap(t *testing.T) {
	const conns = 200
	s := serveOn(t, Config{MaxConnsPerIP: conns + 1, AuthTimeout: time.Minute}, loopbackListener(t))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for range conns {
		dialPlain(t, s)
	}
	waitFor(t, "the connections to start", func() {}, func() bool { return connCount(s) == conns })
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / conns
	t.Logf("%d bytes of heap per unauthenticated connection", per)
	if per > 32<<10 {
		t.Fatalf("%d bytes of heap per unauthenticated connection", per)
	}
	// Authenticating still works, and pipelined requests behind the auth
	// frame survive the switch to full-size read-ahead.
	c := dialPlain(t, s)
	user, pass := "admin", "admin123"
	frames := wire.AppendRequestFrame(nil, 1, &wire.AuthRequest{User: &user, Password: &pass})
	for corr := uint32(2); corr < 50; corr++ {
		frames = wire.AppendRequestFrame(frames, corr, &wire.StatusRequest{})
	}
	if _, err := c.nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	c.answer(1)
	pending := pendingRange(2, 48)
	for range 48 {
		c.anyAnswer(pending, 0, nil)
	}
}
