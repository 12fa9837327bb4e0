// Framing tests: ReadFrame's limit is enforced from the length prefix
// alone (a reader that fails the test if the body is touched proves it),
// end-of-stream errors are distinguished, buffers are reused, and memory
// follows the bytes that arrived rather than the length announced. Header
// parsing rejects bodies shorter than six bytes.
package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// prefixOnly serves a 4-byte length prefix and fails the test if anything
// past it is read.
type prefixOnly struct {
	t      *testing.T
	prefix []byte
}

func (r *prefixOnly) Read(p []byte) (int, error) {
	if len(r.prefix) == 0 {
		r.t.Fatal("ReadFrame read past the length prefix")
	}
	n := copy(p, r.prefix)
	r.prefix = r.prefix[n:]
	return n, nil
}

func prefix(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

func TestReadFrameTooLargeReadsNoBody(t *testing.T) {
	for _, tc := range []struct {
		limit, length uint32
	}{
		{limit: 1024, length: 1025},
		{limit: 0, length: DefaultMaxFrame + 1}, // 0 means DefaultMaxFrame
		{limit: 6, length: 0xFFFFFFFF},
	} {
		r := &prefixOnly{t: t, prefix: prefix(tc.length)}
		body, err := ReadFrame(r, tc.limit, nil)
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("limit %d length %d: err = %v, want ErrFrameTooLarge", tc.limit, tc.length, err)
		}
		if len(body) != 0 {
			t.Fatalf("returned %d body bytes", len(body))
		}
	}
}

func TestReadFrameAtLimit(t *testing.T) {
	frame := append(prefix(8), "12345678"...)
	body, err := ReadFrame(bytes.NewReader(frame), 8, nil)
	if err != nil || string(body) != "12345678" {
		t.Fatalf("ReadFrame = %q, %v", body, err)
	}
}

func TestReadFrameEndOfStream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input []byte
		want  error
	}{
		{"empty stream", nil, io.EOF},
		{"partial prefix", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"prefix only", prefix(3), io.ErrUnexpectedEOF},
		{"short body", append(prefix(3), 'a', 'b'), io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(tc.input), 0, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReadFrameEmptyBody(t *testing.T) {
	body, err := ReadFrame(bytes.NewReader(prefix(0)), 0, nil)
	if err != nil || len(body) != 0 {
		t.Fatalf("ReadFrame = %q, %v", body, err)
	}
	if _, _, _, err := ParseRequestHeader(body); !errors.Is(err, ErrMalformed) {
		t.Fatalf("ParseRequestHeader(empty) err = %v", err)
	}
}

func TestReadFrameSequenceReusesBuffer(t *testing.T) {
	var stream []byte
	stream = AppendRequestFrame(stream, 1, ListUsersRequest{})
	stream = AppendRequestFrame(stream, 2, DeleteUserRequest{User: new("alice")})
	r := bytes.NewReader(stream)
	buf := make([]byte, 0, 256)
	for want := uint32(1); want <= 2; want++ {
		body, err := ReadFrame(r, 0, buf)
		if err != nil {
			t.Fatal(err)
		}
		if &body[:1][0] != &buf[:1][0] {
			t.Fatal("body does not reuse buf")
		}
		if _, corr, _, _ := ParseRequestHeader(body); corr != want {
			t.Fatalf("corr = %d, want %d", corr, want)
		}
	}
	if _, err := ReadFrame(r, 0, buf); !errors.Is(err, io.EOF) {
		t.Fatalf("after last frame err = %v, want io.EOF", err)
	}
	frame := AppendRequestFrame(nil, 7, ListUsersRequest{})
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ReadFrame(bytes.NewReader(frame), 0, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 { // the bytes.Reader itself
		t.Fatalf("ReadFrame with a large enough buf allocates %.0f times", allocs)
	}
}

func TestReadFrameLargeBody(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789"), 50_000) // grows across several chunks
	frame := append(prefix(uint32(len(payload))), payload...)
	body, err := ReadFrame(bytes.NewReader(frame), 0, nil)
	if err != nil || !bytes.Equal(body, payload) {
		t.Fatalf("large body: err %v, equal %v", err, bytes.Equal(body, payload))
	}
}

// A peer that announces the maximum and sends ten bytes must not make the
// reader allocate the maximum.
func TestReadFrameMemoryFollowsBytesReceived(t *testing.T) {
	input := append(prefix(DefaultMaxFrame), make([]byte, 10)...)
	body, err := ReadFrame(bytes.NewReader(input), 0, nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if cap(body) > 2*readChunk {
		t.Fatalf("buffer grew to %d bytes for 10 received", cap(body))
	}
}

func TestShortHeaders(t *testing.T) {
	for n := range RequestHeaderSize {
		body := make([]byte, n)
		if _, _, _, err := ParseRequestHeader(body); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseRequestHeader(%d bytes) err = %v", n, err)
		}
		if _, _, _, err := ParseResponse(body); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseResponse(%d bytes) err = %v", n, err)
		}
	}
	key, corr, payload, err := ParseRequestHeader([]byte{0, 3, 0, 0, 0, 9})
	if err != nil || key != KeyFetch || corr != 9 || len(payload) != 0 {
		t.Fatalf("6-byte body: key %d corr %d payload %x err %v", key, corr, payload, err)
	}
}

func TestOKFrameNilResponse(t *testing.T) {
	want := []byte{0, 0, 0, 6, 0, 0, 0, 5, 0, 0}
	if got := AppendOKFrame(nil, 5, nil); !bytes.Equal(got, want) {
		t.Fatalf("AppendOKFrame(nil) = %x, want %x", got, want)
	}
	if got := AppendOKFrame(nil, 5, EmptyResponse{}); !bytes.Equal(got, want) {
		t.Fatalf("AppendOKFrame(EmptyResponse) = %x, want %x", got, want)
	}
}

func TestDecodeErrorRejectsAbsentReason(t *testing.T) {
	if _, err := DecodeError([]byte{strAbsent}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v, want ErrMalformed", err)
	}
}
