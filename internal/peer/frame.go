package peer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// kind says what a frame is; part of the frame format.
type kind uint8

const (
	kindHello    kind = 1 // dialler's handshake
	kindHelloAck kind = 2 // acceptor's answer to it
	kindMessage  kind = 3 // one-way payload
	kindRequest  kind = 4 // a call's request, answered by id
	kindResponse kind = 5 // a call's answer
	kindError    kind = 6 // a call's failure: code, then text
)

const (
	lengthSize = 4
	// headerSize is everything before the payload: length, CRC32C, kind,
	// channel, flags (2, zero) and request id.
	headerSize = lengthSize + 4 + 1 + 1 + 2 + 8
	// crcStart is where the checksummed bytes begin.
	crcStart = lengthSize + 4

	protocolVersion uint16 = 1
	helloMagic             = "MLPR"
	// maxHelloBytes bounds a handshake frame before the size bound of
	// the configuration applies.
	maxHelloBytes = 1 << 10
	// maxErrorText bounds the text of an error response.
	maxErrorText = 1 << 10

	// flagTrace marks a frame whose payload starts with a trace context:
	// trace id (16 bytes), span id (8), trace flags (1).
	flagTrace uint16 = 1
	// traceBytes is the size of that trace context.
	traceBytes = 16 + 8 + 1

	// capTrace is the capability bit of a hello answer saying the
	// acceptor reads flagTrace frames. A node that predates trace
	// contexts refuses the flag by closing the connection, and answers
	// without a capability byte: it is then sent none.
	capTrace byte = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frame is a decoded frame; payload aliases the buffer it was read into.
// sc is the trace context it carried, if any (marked remote).
type frame struct {
	kind    kind
	ch      Channel
	id      uint64
	payload []byte
	sc      trace.SpanContext
}

// frameBytes is the size of a frame carrying n payload bytes, as
// MaxFrameBytes measures it (after the length prefix).
func frameBytes(n int) int { return headerSize - lengthSize + n }

// encodeFrame returns a new buffer holding the whole frame, with its
// own copy of payload.
func encodeFrame(k kind, ch Channel, id uint64, payload []byte) []byte {
	return encodeTracedFrame(k, ch, id, trace.SpanContext{}, payload)
}

// encodeTracedFrame is encodeFrame carrying sc ahead of the payload
// (flagTrace) when sc is valid.
func encodeTracedFrame(k kind, ch Channel, id uint64, sc trace.SpanContext, payload []byte) []byte {
	extra := 0
	if sc.IsValid() {
		extra = traceBytes
	}
	buf := make([]byte, headerSize+extra+len(payload))
	binary.BigEndian.PutUint32(buf[0:], uint32(frameBytes(extra+len(payload))))
	buf[8] = byte(k)
	buf[9] = byte(ch)
	binary.BigEndian.PutUint64(buf[12:], id)
	if extra > 0 {
		binary.BigEndian.PutUint16(buf[10:], flagTrace)
		tid, sid := sc.TraceID(), sc.SpanID()
		copy(buf[headerSize:], tid[:])
		copy(buf[headerSize+16:], sid[:])
		buf[headerSize+24] = byte(sc.TraceFlags())
	}
	copy(buf[headerSize+extra:], payload)
	binary.BigEndian.PutUint32(buf[4:], crc32.Checksum(buf[crcStart:], castagnoli))
	return buf
}

// errOversize marks a length prefix beyond the bound; it wraps
// ErrFrameTooLarge.
var errOversize = fmt.Errorf("%w (received)", ErrFrameTooLarge)

// errMalformed marks a frame that checksums but makes no sense.
var errMalformed = errors.New("peer: malformed frame")

// readChunk is the buffer a frame's body starts in: a larger frame's
// buffer doubles as its bytes arrive, so the memory a connection holds
// follows what its peer has sent, not what its length prefix claims.
const readChunk = 64 << 10

// readFrame reads one frame of at most maxBytes (after the length
// prefix) into a new buffer, and checks it. It returns the bytes it
// consumed for the counters.
func readFrame(r *bufio.Reader, maxBytes int) (frame, int, error) {
	return readFrameWithin(r, maxBytes, nil, 0)
}

// readFrameWithin is readFrame, and when the body has not all arrived
// with its prefix, the rest must arrive within timeout (a read deadline
// on conn, cleared after the frame): a peer that sends a prefix and
// stalls loses its connection. A nil conn sets no deadline.
func readFrameWithin(r *bufio.Reader, maxBytes int, conn net.Conn, timeout time.Duration) (frame, int, error) {
	var prefix [lengthSize]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return frame{}, 0, err
	}
	n := int(binary.BigEndian.Uint32(prefix[:]))
	if uint64(n) > uint64(maxBytes) {
		return frame{}, lengthSize, errOversize
	}
	if n < headerSize-lengthSize {
		return frame{}, lengthSize, fmt.Errorf("%w: %d bytes is shorter than its header", errMalformed, n)
	}
	if conn != nil && timeout > 0 && r.Buffered() < n {
		if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			return frame{}, lengthSize, err
		}
		defer conn.SetReadDeadline(time.Time{})
	}
	body, err := readBody(r, n)
	if err != nil {
		return frame{}, lengthSize, err
	}
	f, err := decodeBody(body)
	return f, lengthSize + n, err
}

// readBody reads n bytes into a buffer that starts at readChunk and
// doubles while more arrive.
func readBody(r io.Reader, n int) ([]byte, error) {
	body := make([]byte, 0, min(n, readChunk))
	for len(body) < n {
		if len(body) == cap(body) {
			body = slices.Grow(body, min(n-len(body), cap(body)))
		}
		end := min(n, cap(body))
		m, err := io.ReadFull(r, body[len(body):end])
		body = body[:len(body)+m]
		if err != nil {
			return nil, err
		}
	}
	return body, nil
}

// decodeBody checks and splits a frame's bytes after its length prefix.
func decodeBody(body []byte) (frame, error) {
	const h = headerSize - lengthSize
	if len(body) < h {
		return frame{}, fmt.Errorf("%w: shorter than its header", errMalformed)
	}
	if binary.BigEndian.Uint32(body[0:]) != crc32.Checksum(body[4:], castagnoli) {
		return frame{}, ErrCorruptFrame
	}
	f := frame{kind: kind(body[4]), ch: Channel(body[5]), id: binary.BigEndian.Uint64(body[8:]), payload: body[h:]}
	switch flags := binary.BigEndian.Uint16(body[6:]); flags {
	case 0:
	case flagTrace:
		sc, err := decodeTrace(f.payload)
		if err != nil {
			return frame{}, err
		}
		f.sc, f.payload = sc, f.payload[traceBytes:]
	default:
		return frame{}, fmt.Errorf("%w: flags %#x are not known", errMalformed, flags)
	}
	if f.kind < kindHello || f.kind > kindError {
		return frame{}, fmt.Errorf("%w: kind %d is not known", errMalformed, f.kind)
	}
	return f, nil
}

// decodeTrace reads the trace context at the front of a flagged frame's
// payload.
func decodeTrace(b []byte) (trace.SpanContext, error) {
	if len(b) < traceBytes {
		return trace.SpanContext{}, fmt.Errorf("%w: a trace context of %d bytes", errMalformed, len(b))
	}
	var cfg trace.SpanContextConfig
	copy(cfg.TraceID[:], b)
	copy(cfg.SpanID[:], b[16:])
	cfg.TraceFlags = trace.TraceFlags(b[24])
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	if !sc.IsValid() {
		return trace.SpanContext{}, fmt.Errorf("%w: a trace context with a zero id", errMalformed)
	}
	return sc, nil
}

// hello is the dialler's handshake: who it is, who it means to reach.
type hello struct {
	version uint16
	from    uint64
	to      uint64
	cluster string
}

func (h hello) encode() []byte {
	b := make([]byte, 0, 4+2+8+8+1+len(h.cluster))
	b = append(b, helloMagic...)
	b = binary.BigEndian.AppendUint16(b, h.version)
	b = binary.BigEndian.AppendUint64(b, h.from)
	b = binary.BigEndian.AppendUint64(b, h.to)
	b = append(b, byte(len(h.cluster)))
	return append(b, h.cluster...)
}

func decodeHello(b []byte) (hello, error) {
	const fixed = 4 + 2 + 8 + 8 + 1
	if len(b) < fixed || string(b[:4]) != helloMagic {
		return hello{}, errors.New("not a peer handshake")
	}
	h := hello{
		version: binary.BigEndian.Uint16(b[4:]),
		from:    binary.BigEndian.Uint64(b[6:]),
		to:      binary.BigEndian.Uint64(b[14:]),
	}
	if n := int(b[22]); len(b) != fixed+n {
		return hello{}, errors.New("handshake cluster id length mismatch")
	}
	h.cluster = string(b[fixed:])
	return h, nil
}

// helloAck is the acceptor's answer: its version and id, and whether it
// took the connection (reason says why not). An accepting answer ends
// with a byte of capabilities (capTrace); the hello itself cannot grow
// (older acceptors want its exact length), but older diallers read an
// accepting answer's first 11 bytes only, so the answer can. An answer
// without the byte, from an older acceptor, declares none.
type helloAck struct {
	version uint16
	node    uint64
	ok      bool
	caps    byte
	reason  string
}

func (a helloAck) encode() []byte {
	b := binary.BigEndian.AppendUint16(nil, a.version)
	b = binary.BigEndian.AppendUint64(b, a.node)
	if a.ok {
		return append(b, 1, a.caps)
	}
	return append(append(b, 0), truncate(a.reason, maxErrorText)...)
}

func decodeHelloAck(b []byte) (helloAck, error) {
	if len(b) < 11 || b[10] > 1 {
		return helloAck{}, errors.New("malformed handshake answer")
	}
	a := helloAck{
		version: binary.BigEndian.Uint16(b),
		node:    binary.BigEndian.Uint64(b[2:]),
		ok:      b[10] == 1,
	}
	switch {
	case !a.ok:
		a.reason = string(b[11:])
	case len(b) > 11:
		a.caps = b[11]
	}
	return a, nil
}

// stripTrace returns buf, a whole encoded frame, without its trace
// context: for a connection to a node that did not declare capTrace.
// It reuses buf's bytes.
func stripTrace(buf []byte) []byte {
	if len(buf) < headerSize+traceBytes || binary.BigEndian.Uint16(buf[10:])&flagTrace == 0 {
		return buf
	}
	copy(buf[traceBytes:], buf[:headerSize])
	buf = buf[traceBytes:]
	binary.BigEndian.PutUint32(buf[0:], uint32(len(buf)-lengthSize))
	binary.BigEndian.PutUint16(buf[10:], binary.BigEndian.Uint16(buf[10:])&^flagTrace)
	binary.BigEndian.PutUint32(buf[4:], crc32.Checksum(buf[crcStart:], castagnoli))
	return buf
}

// errorPayload encodes a call's failure.
func errorPayload(code ErrorCode, text string) []byte {
	return append([]byte{byte(code)}, truncate(text, maxErrorText)...)
}

func decodeError(node uint64, b []byte) *RemoteError {
	if len(b) == 0 {
		return &RemoteError{Node: node, Code: CodeHandler, Message: "empty error response"}
	}
	return &RemoteError{Node: node, Code: ErrorCode(b[0]), Message: string(b[1:])}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
