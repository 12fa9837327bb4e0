package peer

// The frame codec: round trips, every refusal the reader makes, and a
// fuzzer that feeds it arbitrary bytes.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	payload := []byte("raft batch")
	buf := encodeFrame(kindRequest, ChannelForward, 42, payload)
	payload[0] = 'X' // the frame holds its own copy
	f, n, err := readFrame(bufio.NewReader(bytes.NewReader(buf)), minFrameBytes)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(buf) || f.kind != kindRequest || f.ch != ChannelForward || f.id != 42 || string(f.payload) != "raft batch" {
		t.Fatalf("decoded %+v (%d bytes)", f, n)
	}
	if got := binary.BigEndian.Uint32(buf); int(got) != frameBytes(len(payload)) {
		t.Fatalf("length prefix %d", got)
	}
}

func TestFrameRefusals(t *testing.T) {
	good := encodeFrame(kindMessage, ChannelRaft, 0, []byte("payload"))
	mutate := func(f func([]byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	for name, tc := range map[string]struct {
		buf  []byte
		want error
	}{
		"bit flip in payload": {mutate(func(b []byte) { b[len(b)-2] ^= 0x10 }), ErrCorruptFrame},
		"bit flip in header":  {mutate(func(b []byte) { b[9] ^= 0x01 }), ErrCorruptFrame},
		"oversize":            {encodeFrame(kindMessage, ChannelRaft, 0, make([]byte, minFrameBytes)), ErrFrameTooLarge},
		"unknown kind":        {encodeFrame(kind(9), ChannelRaft, 0, nil), errMalformed},
		"short":               {binary.BigEndian.AppendUint32(nil, 3), errMalformed},
	} {
		_, _, err := readFrame(bufio.NewReader(bytes.NewReader(tc.buf)), minFrameBytes)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

func TestHandshakeCodec(t *testing.T) {
	h := hello{version: protocolVersion, from: 7, to: 9, cluster: "prod-eu"}
	got, err := decodeHello(h.encode())
	if err != nil || got != h {
		t.Fatalf("hello: %+v %v", got, err)
	}
	for _, a := range []helloAck{{version: 1, node: 9, ok: true}, {version: 1, node: 9, reason: "cluster mismatch"}} {
		got, err := decodeHelloAck(a.encode())
		if err != nil || got != a {
			t.Fatalf("ack: %+v %v", got, err)
		}
	}
	if _, err := decodeHello([]byte("GET / HTTP/1.1\r\n\r\n")); err == nil {
		t.Error("took an HTTP request for a handshake")
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(encodeFrame(kindMessage, ChannelRaft, 0, []byte("x")))
	f.Add(encodeFrame(kindHello, 0, 0, hello{version: 1, from: 1, to: 2, cluster: "c"}.encode()))
	f.Add(encodeFrame(kindError, 0, 5, errorPayload(CodeBusy, "busy")))
	f.Add(encodeTracedFrame(kindRequest, ChannelForward, 7, testSpanContext(true), []byte("traced")))
	f.Add(encodeFrame(kindHelloAck, 0, 0, helloAck{version: 1, node: 2, ok: true, caps: capTrace}.encode()))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := readFrame(bufio.NewReader(bytes.NewReader(b)), minFrameBytes)
		if err != nil {
			return
		}
		if n > len(b) || n-lengthSize > minFrameBytes {
			t.Fatalf("consumed %d of %d bytes", n, len(b))
		}
		if !bytes.Equal(encodeTracedFrame(fr.kind, fr.ch, fr.id, fr.sc, fr.payload), b[:n]) {
			t.Fatal("a frame that checks out does not encode back to itself")
		}
		stripped, _, err := readFrame(bufio.NewReader(bytes.NewReader(stripTrace(bytes.Clone(b[:n])))), minFrameBytes)
		if err != nil || stripped.sc.IsValid() || !bytes.Equal(stripped.payload, fr.payload) || stripped.id != fr.id {
			t.Fatalf("the frame without its trace context reads as %+v, %v", stripped, err)
		}
		decodeHello(fr.payload)
		decodeHelloAck(fr.payload)
		decodeError(1, fr.payload)
	})
}
