package server

import (
	"io"
	"math/bits"
	"sync"
)

// Buffers follow the traffic: a connection borrows a buffer to read a
// frame (and, while pipelined bytes wait, to read ahead), and its writer
// borrows one while it has answers to write; each goes back to a node-wide
// pool as soon as it is empty. An idle connection holds none, whatever it
// sent before. The pools are sync.Pools, which release what stays unused
// across garbage collections, so the node's buffers follow its load rather
// than the largest frame each connection ever sent.

// framePool holds buffers in power-of-two size classes from 512 B to
// 16 MiB.
var framePool [maxPooledShift - minPooledShift + 1]sync.Pool

const (
	minPooledShift = 9  // 512 B
	maxPooledShift = 24 // 16 MiB
)

// Read-ahead sizes: small until the connection has authenticated, so a
// peer that has not said who it is cannot make the node hold much.
const (
	smallReadAhead = 4 << 10
	fullReadAhead  = 64 << 10
	writeBuffer    = 64 << 10
)

// borrowFrame returns a buffer of length 0 and capacity frameCap(n).
func borrowFrame(n int) []byte {
	shift := max(bits.Len(uint(max(n, 1)-1)), minPooledShift)
	if shift > maxPooledShift {
		return make([]byte, 0, n)
	}
	if b, ok := framePool[shift-minPooledShift].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 1<<shift)
}

// frameCap is the capacity of the buffer borrowFrame(n) returns: what a
// frame of n bytes costs while it is held.
func frameCap(n int) int {
	shift := max(bits.Len(uint(max(n, 1)-1)), minPooledShift)
	if shift > maxPooledShift {
		return n
	}
	return 1 << shift
}

// returnFrame gives a buffer back to its size class; buffers of no class
// are left to the garbage collector. The caller must not use b after.
func returnFrame(b []byte) {
	c := cap(b)
	if c == 0 {
		return
	}
	shift := bits.Len(uint(c)) - 1
	if c != 1<<shift || shift < minPooledShift || shift > maxPooledShift {
		return
	}
	b = b[:0]
	framePool[shift-minPooledShift].Put(&b)
}

// inbuf buffers a connection's reads, holding a pooled buffer only while
// bytes are buffered. A small read on an empty buffer (the length prefix
// of the next frame, which is where an idle connection waits) goes
// straight to the socket, so waiting costs no buffer; a larger one borrows
// read-ahead, so pipelined frames share a syscall. Reader goroutine only.
type inbuf struct {
	src  io.Reader
	buf  []byte // borrowed read-ahead; nil when empty
	r, w int
	err  error // a read error held back until the buffered bytes are taken
	size int   // read-ahead to borrow
}

// directRead is the largest read that waits on the socket without a
// buffer: a length prefix.
const directRead = 16

func (b *inbuf) Read(p []byte) (int, error) {
	if b.buf == nil {
		if b.err != nil {
			err := b.err
			b.err = nil
			return 0, err
		}
		if len(p) <= directRead || len(p) >= b.size {
			return b.src.Read(p)
		}
		// A frame's bytes are on their way: wait for them in read-ahead.
		b.buf = borrowFrame(b.size)[:b.size]
		n, err := b.src.Read(b.buf)
		b.r, b.w, b.err = 0, n, err
		if n == 0 {
			b.release()
			return b.Read(p)
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	if b.r == b.w {
		b.release()
	}
	return n, nil
}

func (b *inbuf) release() {
	returnFrame(b.buf)
	b.buf, b.r, b.w = nil, 0, 0
}

// held is the read-ahead the connection holds now, in bytes.
func (b *inbuf) held() int { return cap(b.buf) }
