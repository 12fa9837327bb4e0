package server

import (
	"io"
	"net"
	"time"
)

// outFrame is one frame for the writer: its bytes in b, or, for an answer
// laid out for a vectored write, in pieces (written in order). Its n bytes
// are charged to the budget until written. release, when set, is called
// once the frame is written or dropped (the connection failed): pieces
// may lie in pooled read buffers that it gives back.
type outFrame struct {
	b       []byte
	pieces  [][]byte
	n       int64
	release func()
}

// The writer sends what is queued in rounds: each round gathers the queued
// frames into vectored writes (writev on a plain TCP socket). Small frames
// and pieces are copied into a borrowed buffer so pipelined answers share
// a system call; larger pieces, such as the stored batches of a fetch
// answer, are written from where they are, never copied in user space.
//
// WriteTimeout bounds each write, so a write carries at most writeBuffer
// bytes of small frames or one larger frame, as a buffered writer's did:
// a client that reads each answer within the timeout is served however
// many it has asked for, and one that stops reading is closed once a
// write has waited the timeout. A deadline over several large answers
// would close a client reading steadily but a little slower than the
// timeout for all of them.
//
// Which pieces are copied depends on the connection. On a plain socket a
// piece of 4 KiB or more goes as its own iovec: a fetch answer over many
// ranges holds many stored batches of a few KiB, and copying them into
// 64 KiB buffers cost a copy of every byte and a write per 64 KiB, where
// one writev takes them all. Over TLS each piece is a write of its own
// (and a record), so pieces under 16 KiB are still gathered.
const (
	copyBelowPlain = 4 << 10  // plain socket: smaller pieces are copied
	copyBelowTLS   = 16 << 10 // TLS: smaller pieces are copied
	maxRoundSize   = 4 << 20  // bytes gathered before they are written
	maxRoundVecs   = 256      // pieces gathered before they are written
)

// gather holds one round of the writer's bytes. Writer goroutine only.
type gather struct {
	copyBelow int         // pieces below it are copied into buf
	buf       []byte      // borrowed (writeBuffer bytes) on first use
	from      int         // buf[from:] is not in vec yet
	vec       net.Buffers // what the next write sends, in order
	size      int         // bytes in vec and buf[from:]
}

// frame starts a frame of n bytes, first writing out what the round holds
// when both would not fit in one buffer's worth: a write carries small
// frames up to writeBuffer bytes, or one larger frame.
func (g *gather) frame(n int64, write func(net.Buffers)) {
	if g.size > 0 && int64(g.size)+n > writeBuffer {
		g.flush(write)
	}
}

// add appends p to the round, writing the round out first or after when
// it is full.
func (g *gather) add(p []byte, write func(net.Buffers)) {
	if len(p) >= g.copyBelow {
		g.cut()
		g.vec = append(g.vec, p)
		g.size += len(p)
		if g.size >= maxRoundSize || len(g.vec) >= maxRoundVecs {
			g.flush(write)
		}
		return
	}
	if g.buf == nil {
		g.buf = borrowFrame(writeBuffer)
	}
	if len(g.buf)+len(p) > cap(g.buf) {
		g.flush(write)
	}
	g.buf = append(g.buf, p...)
	g.size += len(p)
}

// cut moves the buffer's pending bytes into vec.
func (g *gather) cut() {
	if g.from < len(g.buf) {
		g.vec = append(g.vec, g.buf[g.from:len(g.buf):len(g.buf)])
		g.from = len(g.buf)
	}
}

// flush writes the round and starts the next one.
func (g *gather) flush(write func(net.Buffers)) {
	g.cut()
	if len(g.vec) > 0 {
		write(g.vec) // WriteTo consumes a copy of the slice header, not g.vec
	}
	clear(g.vec)
	g.vec, g.buf, g.from, g.size = g.vec[:0], g.buf[:0], 0, 0
}

func (g *gather) release() {
	returnFrame(g.buf)
	*g = gather{copyBelow: g.copyBelow}
}

// enqueue hands a frame, which holds a slot, to the writer, starting a
// writer goroutine if none runs. It never blocks, as produce answers are
// queued from the segment store's commit goroutine, which must not wait
// for a client; out stays bounded because every frame in it holds a slot.
func (c *conn) enqueue(f outFrame) {
	if c.put(f) {
		go c.writeLoop()
	}
}

// enqueueHere is enqueue for a request goroutine whose work is done once
// its answer is queued: when no writer runs, it writes the answer itself
// rather than start a goroutine to. A long poll woken with thousands of
// others then costs one goroutine, not two.
func (c *conn) enqueueHere(f outFrame) {
	if c.put(f) {
		c.writeLoop()
	}
}

// put queues f and reports whether the caller must run the writer, which
// it then counts as running.
func (c *conn) put(f outFrame) bool {
	c.outMu.Lock()
	c.out = append(c.out, f)
	start := !c.writerOn
	c.writerOn = true
	c.outMu.Unlock()
	if start {
		c.writers.Add(1)
		c.goroutines.Add(1)
	}
	return start
}

// next takes the queued frames, or reports that the writer ends because
// none are queued.
func (c *conn) next() (frames []outFrame, end bool) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	frames, c.out = c.out, nil
	if len(frames) == 0 {
		c.writerOn = false
		return nil, true
	}
	return frames, false
}

// writeLoop writes the queued frames round by round and ends once nothing
// is queued. Each frame's slot and bytes are given back once its round is
// written (or dropped, after the socket failed).
func (c *conn) writeLoop() {
	defer c.writers.Done()
	defer c.goroutines.Add(-1)
	g := gather{copyBelow: copyBelowPlain}
	if c.tlsState() != nil {
		g.copyBelow = copyBelowTLS
	}
	defer g.release()
	dst := c.writeTarget()
	write := func(v net.Buffers) { c.write(dst, v) }
	for {
		frames, end := c.next()
		if end {
			return
		}
		for _, f := range frames {
			if c.ctx.Err() != nil {
				break
			}
			g.frame(f.n, write)
			if f.pieces == nil {
				g.add(f.b, write)
				continue
			}
			for _, p := range f.pieces {
				g.add(p, write)
			}
		}
		g.flush(write)
		for i, f := range frames {
			frames[i] = outFrame{}
			if f.release != nil {
				f.release() // written: no write of this round refers to it now
			}
			c.budget.written(f.n)
			<-c.slots
		}
	}
}

// writeTarget is what the writer writes to: the TLS connection, or the
// socket itself on a plaintext one, so that a vectored write is one
// writev even when the first byte was read through a sniffedConn.
func (c *conn) writeTarget() io.Writer {
	if c.tlsState() != nil {
		return c.nc
	}
	return c.raw
}

// write sends what a round gathered (see gather.frame for how much). A
// write that does not complete within the write timeout fails the
// connection.
func (c *conn) write(w io.Writer, v net.Buffers) {
	if c.ctx.Err() != nil {
		return
	}
	c.raw.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	c.writing.Store(true)
	_, err := v.WriteTo(w)
	c.writing.Store(false)
	if err != nil {
		c.fail()
	}
}
