package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// DefaultMaxFrame is the default limit on a frame body (the value of the
// length prefix), as in wire v1.
const DefaultMaxFrame = 16 << 20

// Response error codes.
const (
	CodeOK    uint16 = 0 // the payload is the operation's result
	CodeError uint16 = 1 // the payload is str(reason); see Reasons
)

// Header sizes in bytes.
const (
	LenPrefixSize      = 4 // len:u32
	RequestHeaderSize  = 6 // api_key:u16 correlation_id:u32
	ResponseHeaderSize = 6 // correlation_id:u32 error_code:u16
)

var (
	// ErrFrameTooLarge means a length prefix exceeded the reader's limit.
	// The body was not read, so the stream is out of sync: answer
	// frame_too_large with correlation id 0 and close.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrMalformed means bytes did not decode exactly: too short, trailing
	// bytes, a bad tag, or a count larger than the remaining bytes could hold.
	ErrMalformed = errors.New("wire: malformed")
	// ErrUnknownAPIKey means DecodeRequest does not know the api key.
	ErrUnknownAPIKey = errors.New("wire: unknown api key")
)

// readChunk bounds how far ReadFrame grows its buffer ahead of the bytes
// that actually arrived.
const readChunk = 64 << 10

// ReadFrame reads one length-prefixed frame from r and returns its body,
// stored in buf when buf has the capacity, else in a grown copy. The result
// is valid until the next call that reuses the same buffer.
//
// The length prefix is checked against limit (0 means DefaultMaxFrame) as
// soon as it is read: a larger frame returns an error wrapping
// ErrFrameTooLarge without reading any of the body. Memory grows with the
// bytes received, not with the announced length, so a peer that announces
// a large frame and then stalls costs little.
//
// A clean end of stream before the first byte returns io.EOF; a stream
// that ends inside a frame returns io.ErrUnexpectedEOF. On error the
// returned slice is still the (possibly grown) buffer, for reuse.
func ReadFrame(r io.Reader, limit uint32, buf []byte) ([]byte, error) {
	if limit == 0 {
		limit = DefaultMaxFrame
	}
	if cap(buf) < LenPrefixSize {
		buf = make([]byte, 0, 512)
	}
	prefix := buf[:LenPrefixSize]
	if _, err := io.ReadFull(r, prefix); err != nil {
		return buf[:0], err
	}
	n := binary.BigEndian.Uint32(prefix)
	if n > limit || uint64(n) > math.MaxInt {
		return buf[:0], fmt.Errorf("%w: %d bytes > limit %d", ErrFrameTooLarge, n, limit)
	}
	return readBody(r, buf[:0], int(n))
}

// readBody reads exactly n bytes into buf[:0], growing it at most readChunk
// (or its current size) ahead of the data read so far.
func readBody(r io.Reader, buf []byte, n int) ([]byte, error) {
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(n-len(buf), max(len(buf), readChunk)))
		}
		end := min(n, cap(buf))
		k, err := io.ReadFull(r, buf[len(buf):end])
		buf = buf[:len(buf)+k]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
	}
	return buf, nil
}

// ParseRequestHeader splits a request body into its header and payload.
// The payload aliases body. A body shorter than the 6-byte header returns
// an error wrapping ErrMalformed (answer malformed_request with
// correlation id 0).
func ParseRequestHeader(body []byte) (key uint16, corr uint32, payload []byte, err error) {
	if len(body) < RequestHeaderSize {
		return 0, 0, nil, fmt.Errorf("%w: request body of %d bytes is shorter than its header", ErrMalformed, len(body))
	}
	key = binary.BigEndian.Uint16(body)
	corr = binary.BigEndian.Uint32(body[2:])
	return key, corr, body[RequestHeaderSize:], nil
}

// ParseResponse splits a response body into its header and payload. The
// payload aliases body. The code is returned as sent; CodeOK and CodeError
// are the only codes servers send.
func ParseResponse(body []byte) (corr uint32, code uint16, payload []byte, err error) {
	if len(body) < ResponseHeaderSize {
		return 0, 0, nil, fmt.Errorf("%w: response body of %d bytes is shorter than its header", ErrMalformed, len(body))
	}
	corr = binary.BigEndian.Uint32(body)
	code = binary.BigEndian.Uint16(body[4:])
	return corr, code, body[ResponseHeaderSize:], nil
}

// AppendRequestFrame appends a whole request frame (length prefix, header,
// payload) to dst.
func AppendRequestFrame(dst []byte, corr uint32, req Request) []byte {
	dst, start := startFrame(dst)
	dst = binary.BigEndian.AppendUint16(dst, req.APIKey())
	dst = binary.BigEndian.AppendUint32(dst, corr)
	dst = req.AppendPayload(dst)
	return finishFrame(dst, start)
}

// AppendOKFrame appends an ok response frame to dst. A nil resp appends an
// empty payload, the answer of operations that return nothing.
func AppendOKFrame(dst []byte, corr uint32, resp Response) []byte {
	dst, start := startResponse(dst, corr, CodeOK)
	if resp != nil {
		dst = resp.AppendPayload(dst)
	}
	return finishFrame(dst, start)
}

// AppendErrorFrame appends an error response frame carrying reason, one of
// the strings in Reasons.
func AppendErrorFrame(dst []byte, corr uint32, reason string) []byte {
	dst, start := startResponse(dst, corr, CodeError)
	dst = appendString(dst, reason)
	return finishFrame(dst, start)
}

// DecodeError decodes the payload of an error response: exactly one
// present str.
func DecodeError(payload []byte) (string, error) {
	d := decoder{b: payload}
	reason := d.str()
	return reason, d.finish("error response")
}

// startFrame appends a length placeholder for a frame that starts at the
// returned offset; finishFrame fills it in once the body is appended.
func startFrame(dst []byte) ([]byte, int) {
	return append(dst, 0, 0, 0, 0), len(dst)
}

func startResponse(dst []byte, corr uint32, code uint16) ([]byte, int) {
	dst, start := startFrame(dst)
	dst = binary.BigEndian.AppendUint32(dst, corr)
	return binary.BigEndian.AppendUint16(dst, code), start
}

func finishFrame(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-LenPrefixSize))
	return dst
}
