package broker

import (
	"sync/atomic"

	"github.com/malachi-log/malachi/internal/storage"
)

// A v2 page's batches lie, as stored, in buffers the store read them into
// from its pool (storage.ReadPooled). The page holds those buffers until
// whoever took it releases it (BatchPage.Release, Page.Release): the
// server, once the answer is written or dropped. Every page must be
// released: the buffers are slab memory, which the garbage collector does
// not take, so those of a page never released stay taken for the life of
// the process (the read pool bounds what its slab maps; past that, reads
// go to heap buffers). A page released while its batches are still read
// is worse, and nothing here releases a page its taker may still use.

// readHold is one holder's reference on the buffers a page's batches lie
// in. Several holders (the readers a shared page serves) each have their
// own; a buffer goes back to the pool when the last releases it.
type readHold struct {
	bufs []*storage.ReadBuf
	done atomic.Bool
}

// add makes rb part of the page, with the reference its read gave.
func (h *readHold) add(rb *storage.ReadBuf) {
	if rb != nil {
		h.bufs = append(h.bufs, rb)
	}
}

// empty says the hold holds nothing (nil included).
func (h *readHold) empty() bool { return h == nil || len(h.bufs) == 0 }

// bytes is the memory the hold keeps from the pool.
func (h *readHold) bytes() int {
	if h == nil {
		return 0
	}
	n := 0
	for _, b := range h.bufs {
		n += b.Len()
	}
	return n
}

// retain adds n references on every buffer, for holders the caller will
// hand a hold over the same buffers (prepaid). The caller must hold h.
func (h *readHold) retain(n int) {
	if h == nil {
		return
	}
	for _, b := range h.bufs {
		b.Retain(n)
	}
}

// share returns a new holder's hold of h's buffers. The caller must hold h.
func (h *readHold) share() *readHold {
	if h.empty() {
		return nil
	}
	h.retain(1)
	return &readHold{bufs: h.bufs}
}

// prepaid returns a hold of h's buffers for a holder whose references
// were taken already (retain).
func (h *readHold) prepaid() *readHold {
	if h.empty() {
		return nil
	}
	return &readHold{bufs: h.bufs}
}

// release drops this holder's references, once however often it is called.
func (h *readHold) release() {
	if h == nil || h.done.Swap(true) {
		return
	}
	for _, b := range h.bufs {
		b.Release()
	}
}

// holdsReads is a page that may lie in pooled buffers (cutPage).
type holdsReads interface {
	reads() *readHold
	// withReads is the same page for another holder, with its own hold.
	withReads(h *readHold) any
}

func holdOf(page any) *readHold {
	if p, ok := page.(holdsReads); ok {
		return p.reads()
	}
	return nil
}

// Release gives back the pooled buffers the page's batches lie in. Call it
// once nothing reads the batches any more (the answer is written, or will
// not be); the batches must not be used after. A page read without pooled
// buffers, or the zero page, releases nothing.
func (p BatchPage) Release() { p.hold.release() }

// Release is BatchPage.Release for a subscription's page.
func (p Page) Release() { p.hold.release() }
