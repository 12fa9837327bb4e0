package server

import (
	"encoding/binary"
	"math/bits"
	"sync"

	"github.com/malachi-log/malachi/internal/wire"
)

// framePool lends buffers for frames larger than keepFrameBuffer, in
// power-of-two size classes from 128 KiB to 16 MiB. A sync.Pool releases
// what stays unused across garbage collections, so buffers follow the load
// rather than the largest frame each connection ever sent.
var framePool [maxPooledShift - minPooledShift + 1]sync.Pool

const (
	minPooledShift = 17 // 128 KiB
	maxPooledShift = 24 // 16 MiB
)

// frameBufFor returns the buffer to read the next frame into: own, the
// connection's small buffer, unless the next frame's length prefix (when
// already readable) announces a frame above keepFrameBuffer and within
// limit, which gets a lent buffer. A prefix that cannot be peeked, or
// announces too large a frame, leaves ReadFrame to report it.
func (c *conn) frameBufFor(own []byte, limit uint32) []byte {
	p, err := c.br.Peek(wire.LenPrefixSize)
	if err != nil {
		return own
	}
	n := binary.BigEndian.Uint32(p)
	if n <= keepFrameBuffer || n > limit {
		return own
	}
	return borrowFrame(int(n))
}

// borrowFrame returns a buffer of capacity at least n.
func borrowFrame(n int) []byte {
	shift := max(bits.Len(uint(n-1)), minPooledShift)
	if shift > maxPooledShift {
		return make([]byte, 0, n)
	}
	if b, ok := framePool[shift-minPooledShift].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 1<<shift)
}

// returnFrame gives a frame buffer back to its size class; buffers of no
// class (grown by ReadFrame past a class, or above the largest) are left
// to the garbage collector.
func returnFrame(b []byte) {
	c := cap(b)
	shift := bits.Len(uint(c)) - 1
	if c != 1<<shift || shift < minPooledShift || shift > maxPooledShift {
		return
	}
	b = b[:0]
	framePool[shift-minPooledShift].Put(&b)
}
