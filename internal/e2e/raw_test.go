// Package e2e holds end-to-end tests that speak to a real node over real
// sockets. The frames here are built by hand from wire-v1.md, not with the
// server's own encoder, so an encoder bug cannot hide itself.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/server"
)

// node starts a broker and a server on a temporary directory.
func node(t *testing.T, scfg server.Config) string {
	t.Helper()
	ctx := context.Background()
	b, err := broker.Open(ctx, broker.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SeedUsers(ctx, true, ""); err != nil {
		t.Fatal(err)
	}
	scfg.Addr = "127.0.0.1:0"
	srv := server.New(scfg, b)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		b.Close()
	})
	return srv.Addr().String()
}

// enc builds payloads by hand from the spec: big-endian integers,
// str = 0x00 (nil) | 0x01 len:u32 bytes.
type enc struct{ bytes.Buffer }

func (e *enc) u8(v uint8)   { e.WriteByte(v) }
func (e *enc) u16(v uint16) { binary.Write(&e.Buffer, binary.BigEndian, v) }
func (e *enc) u32(v uint32) { binary.Write(&e.Buffer, binary.BigEndian, v) }
func (e *enc) u64(v uint64) { binary.Write(&e.Buffer, binary.BigEndian, v) }
func (e *enc) str(s string) { e.u8(1); e.u32(uint32(len(s))); e.WriteString(s) }
func (e *enc) nilStr()      { e.u8(0) }
func (e *enc) opt(s *string) {
	if s == nil {
		e.nilStr()
		return
	}
	e.str(*s)
}

func frame(key uint16, corr uint32, payload []byte) []byte {
	var e enc
	e.u32(uint32(6 + len(payload)))
	e.u16(key)
	e.u32(corr)
	e.Write(payload)
	return e.Bytes()
}

// dec reads responses by hand.
type dec struct {
	b []byte
	t *testing.T
}

func (d *dec) u8() uint8   { v := d.b[0]; d.b = d.b[1:]; return v }
func (d *dec) u16() uint16 { v := binary.BigEndian.Uint16(d.b); d.b = d.b[2:]; return v }
func (d *dec) u32() uint32 { v := binary.BigEndian.Uint32(d.b); d.b = d.b[4:]; return v }
func (d *dec) u64() uint64 { v := binary.BigEndian.Uint64(d.b); d.b = d.b[8:]; return v }
func (d *dec) str() *string {
	if d.u8() == 0 {
		return nil
	}
	n := d.u32()
	s := string(d.b[:n])
	d.b = d.b[n:]
	return &s
}

type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *rawConn) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// read returns the next response: correlation id, error code, payload.
func (c *rawConn) read() (uint32, uint16, *dec) {
	c.t.Helper()
	var hdr [4]byte
	if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(c.br, body); err != nil {
		c.t.Fatalf("read body: %v", err)
	}
	d := &dec{b: body, t: c.t}
	return d.u32(), d.u16(), d
}

// expectError reads one response and checks it is the given error reason.
func (c *rawConn) expectError(corr uint32, reason string) {
	c.t.Helper()
	gotCorr, code, d := c.read()
	if code != 1 {
		c.t.Fatalf("corr %d: want error %q, got ok", gotCorr, reason)
	}
	got := d.str()
	if gotCorr != corr || got == nil || *got != reason {
		c.t.Fatalf("want (corr %d, %q), got (corr %d, %v)", corr, reason, gotCorr, deref(got))
	}
}

func (c *rawConn) expectOK(corr uint32) *dec {
	c.t.Helper()
	gotCorr, code, d := c.read()
	if code != 0 || gotCorr != corr {
		reason := ""
		if code == 1 {
			reason = deref(d.str())
		}
		c.t.Fatalf("want ok for corr %d, got corr %d code %d %s", corr, gotCorr, code, reason)
	}
	return d
}

// expectClosed checks the server closed the connection.
func (c *rawConn) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.br.ReadByte(); err == nil {
		c.t.Fatal("connection still open")
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func authPayload(user, pass string) []byte {
	var e enc
	e.str(user)
	e.str(pass)
	return e.Bytes()
}

func (c *rawConn) auth(user, pass string) {
	c.t.Helper()
	c.write(frame(0, 1, authPayload(user, pass)))
	d := c.expectOK(1)
	if tok := d.str(); tok == nil || *tok == "" {
		c.t.Fatal("empty session token")
	}
}

func createTopicPayload(topic string, bits uint8) []byte {
	var e enc
	e.str(topic)
	e.u8(bits)
	return e.Bytes()
}

type rawRecord struct {
	key     *string
	value   string
	ts      uint64
	headers [][2]string
}

func producePayload(topic string, recs []rawRecord) []byte {
	var e enc
	e.str(topic)
	e.u32(uint32(len(recs)))
	for _, r := range recs {
		e.opt(r.key)
		e.u32(uint32(len(r.value)))
		e.WriteString(r.value)
		e.u64(r.ts)
		e.u32(uint32(len(r.headers)))
		for _, h := range r.headers {
			e.str(h[0])
			e.str(h[1])
		}
	}
	return e.Bytes()
}

func fetchPayload(topic string, cursor, group, member *string, max, wait uint32) []byte {
	var e enc
	e.str(topic)
	e.opt(cursor)
	e.opt(group)
	e.opt(member)
	e.u32(max)
	e.u32(wait)
	return e.Bytes()
}

// readRecords decodes a fetch-shaped payload.
func readRecords(d *dec) ([]rawRecord, *string) {
	n := d.u32()
	var out []rawRecord
	for i := uint32(0); i < n; i++ {
		var r rawRecord
		r.key = d.str()
		vl := d.u32()
		r.value = string(d.b[:vl])
		d.b = d.b[vl:]
		r.ts = d.u64()
		hn := d.u32()
		for j := uint32(0); j < hn; j++ {
			r.headers = append(r.headers, [2]string{deref(d.str()), deref(d.str())})
		}
		out = append(out, r)
	}
	return out, d.str()
}

func sp(s string) *string { return &s }

func TestRawProduceFetchRoundTrip(t *testing.T) {
	addr := node(t, server.Config{})
	c := dial(t, addr)
	c.auth("admin", "admin123")
	c.write(frame(1, 2, createTopicPayload("orders", 16)))
	c.expectOK(2)

	var recs []rawRecord
	for i := 0; i < 50; i++ {
		recs = append(recs, rawRecord{key: sp(fmt.Sprintf("user-%d", i%5)), value: fmt.Sprintf("v%d", i), ts: uint64(1700000000000 + i), headers: [][2]string{{"seq", fmt.Sprint(i)}}})
	}
	recs = append(recs, rawRecord{key: nil, value: "", ts: 1}, rawRecord{key: sp(""), value: "empty-key", ts: 2})
	c.write(frame(2, 3, producePayload("orders", recs)))
	d := c.expectOK(3)
	if n := d.u32(); n != uint32(len(recs)) {
		t.Fatalf("produce count %d, want %d", n, len(recs))
	}

	c.write(frame(3, 4, fetchPayload("orders", nil, nil, nil, 1000, 0)))
	got, cur := readRecords(c.expectOK(4))
	if len(got) != len(recs) || cur == nil {
		t.Fatalf("fetched %d records (cursor %v), want %d", len(got), cur, len(recs))
	}
	byValue := map[string]rawRecord{}
	for _, r := range got {
		byValue[r.value] = r
	}
	for _, want := range recs {
		r, ok := byValue[want.value]
		if !ok || deref(r.key) != deref(want.key) || (r.key == nil) != (want.key == nil) || r.ts != want.ts || len(r.headers) != len(want.headers) {
			t.Fatalf("record %q came back as %+v", want.value, r)
		}
	}
	// Per-key order: values of one key appear in produce order.
	last := map[string]int{}
	for _, r := range got {
		var i int
		if _, err := fmt.Sscanf(r.value, "v%d", &i); err != nil {
			continue
		}
		if prev, ok := last[deref(r.key)]; ok && prev > i {
			t.Fatalf("key %s out of order: %d after %d", deref(r.key), i, prev)
		}
		last[deref(r.key)] = i
	}
	// The cursor resumes after everything: the next fetch is empty.
	c.write(frame(3, 5, fetchPayload("orders", cur, nil, nil, 100, 0)))
	if more, _ := readRecords(c.expectOK(5)); len(more) != 0 {
		t.Fatalf("fetch after the end returned %d records", len(more))
	}
}

func TestRawBadInput(t *testing.T) {
	addr := node(t, server.Config{MaxFrame: 1 << 20})
	type step struct {
		name  string
		auth  bool // authenticate first
		send  []byte
		want  string // error reason
		corr  uint32
		close bool // the server closes after answering
	}
	tooBig := make([]byte, 4)
	binary.BigEndian.PutUint32(tooBig, 2<<20)
	steps := []step{
		{name: "request before auth", send: frame(3, 7, fetchPayload("t", nil, nil, nil, 1, 0)), want: "auth_required", corr: 7, close: true},
		{name: "wrong password", send: frame(0, 8, authPayload("admin", "nope")), want: "invalid_credentials", corr: 8, close: true},
		{name: "unknown user", send: frame(0, 9, authPayload("ghost", "nope")), want: "invalid_credentials", corr: 9, close: true},
		{name: "oversized length prefix", auth: true, send: tooBig, want: "frame_too_large", corr: 0, close: true},
		{name: "body shorter than the header", auth: true, send: []byte{0, 0, 0, 3, 0, 3, 0}, want: "malformed_request", corr: 0},
		{name: "truncated payload", auth: true, send: frame(1, 10, []byte{1, 0, 0, 0, 9, 'a'}), want: "malformed_request", corr: 10},
		{name: "trailing bytes", auth: true, send: frame(1, 11, append(createTopicPayload("x", 8), 0xff)), want: "malformed_request", corr: 11},
		{name: "unknown api key", auth: true, send: frame(999, 12, nil), want: "unknown_api_key", corr: 12},
		{name: "forged cursor", auth: true, send: frame(3, 13, fetchPayload("bad", sp("Zm9yZ2VkLWN1cnNvcg"), nil, nil, 1, 0)), want: "invalid_cursor", corr: 13},
		{name: "truncated cursor", auth: true, send: frame(3, 14, fetchPayload("bad", sp("AQ"), nil, nil, 1, 0)), want: "invalid_cursor", corr: 14},
		{name: "missing topic produce", auth: true, send: frame(2, 15, producePayload("nope", []rawRecord{{value: "x"}})), want: "no_such_topic", corr: 15},
		{name: "invalid topic name", auth: true, send: frame(1, 16, createTopicPayload("../etc", 8)), want: "invalid_topic_name", corr: 16},
		{name: "invalid keyspace bits", auth: true, send: frame(1, 17, createTopicPayload("bits", 40)), want: "invalid_keyspace_bits", corr: 17},
		{name: "stream_ack outside stream mode", auth: true, send: frame(6, 18, func() []byte {
			var e enc
			e.str("bad")
			e.nilStr()
			e.nilStr()
			e.nilStr()
			e.u32(0)
			return e.Bytes()
		}()), want: "unexpected_frame", corr: 18},
	}
	// A topic to make the cursor tests about a real topic.
	setup := dial(t, addr)
	setup.auth("admin", "admin123")
	setup.write(frame(1, 2, createTopicPayload("bad", 8)))
	setup.expectOK(2)
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			c := dial(t, addr)
			if s.auth {
				c.auth("admin", "admin123")
			}
			c.write(s.send)
			c.expectError(s.corr, s.want)
			if s.close {
				c.expectClosed()
				return
			}
			// The node keeps serving this connection.
			c.write(frame(3, 99, fetchPayload("bad", nil, nil, nil, 1, 0)))
			c.expectOK(99)
		})
	}
}

func TestRawClampsHugeMaxAndWindow(t *testing.T) {
	addr := node(t, server.Config{})
	c := dial(t, addr)
	c.auth("admin", "admin123")
	c.write(frame(1, 2, createTopicPayload("clamp", 8)))
	c.expectOK(2)
	var recs []rawRecord
	for i := 0; i < 1500; i++ {
		recs = append(recs, rawRecord{key: sp("k"), value: fmt.Sprint(i)})
	}
	c.write(frame(2, 3, producePayload("clamp", recs)))
	c.expectOK(3)
	c.write(frame(3, 4, fetchPayload("clamp", nil, nil, nil, 0xffffffff, 0)))
	if got, _ := readRecords(c.expectOK(4)); len(got) != 1000 {
		t.Fatalf("max 2^32-1 returned %d records, want the cap of 1000", len(got))
	}
	// wait_ms far above the cap is clamped to 30 s, not refused: the
	// fetch has data so it answers at once.
	c.write(frame(3, 5, fetchPayload("clamp", nil, nil, nil, 1, 0xffffffff)))
	if got, _ := readRecords(c.expectOK(5)); len(got) != 1 {
		t.Fatalf("got %d records", len(got))
	}
	// A subscribe with a huge window and max is clamped: the first push
	// carries at most the max cap of 1000.
	s := dial(t, addr)
	s.auth("admin", "admin123")
	var e enc
	e.str("clamp")
	e.str("g")
	e.nilStr()
	e.u32(0xffffffff)
	e.u32(0xffffffff)
	s.write(frame(5, 6, e.Bytes()))
	got, _ := readRecords(s.expectOK(6))
	if len(got) == 0 || len(got) > 1000 {
		t.Fatalf("first push carried %d records", len(got))
	}
}

func TestRawConnectionCapsPerIP(t *testing.T) {
	addr := node(t, server.Config{MaxConnsPerIP: 2})
	a, b := dial(t, addr), dial(t, addr)
	a.auth("admin", "admin123")
	b.auth("admin", "admin123")
	c := dial(t, addr)
	c.expectError(0, "connection_limit_exceeded")
	c.expectClosed()
	// The first two keep serving.
	a.write(frame(72, 5, nil))
	a.expectOK(5)
}

func TestRawUnauthenticatedConnectionTimesOut(t *testing.T) {
	addr := node(t, server.Config{AuthTimeout: 200 * time.Millisecond})
	c := dial(t, addr)
	// Never authenticates: closed after the auth timeout, without a frame.
	c.expectClosed()
}

func TestRawForeignCursor(t *testing.T) {
	addr := node(t, server.Config{})
	c := dial(t, addr)
	c.auth("admin", "admin123")
	for i, topic := range []string{"one", "two"} {
		c.write(frame(1, uint32(2+i), createTopicPayload(topic, 8)))
		c.expectOK(uint32(2 + i))
	}
	c.write(frame(3, 4, fetchPayload("one", nil, nil, nil, 10, 0)))
	_, cur := readRecords(c.expectOK(4))
	// A genuine cursor of topic one, presented for topic two.
	c.write(frame(3, 5, fetchPayload("two", cur, nil, nil, 10, 0)))
	c.expectError(5, "invalid_cursor")
	var e enc
	e.str("two")
	e.str("g")
	e.opt(cur)
	c.write(frame(4, 6, e.Bytes()))
	c.expectError(6, "invalid_cursor")
	// Still valid for its own topic.
	c.write(frame(3, 7, fetchPayload("one", cur, nil, nil, 10, 0)))
	c.expectOK(7)
}
