package broker

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// watch is a broadcast latch per topic: waiters take the current channel
// before they read, and every durable append closes it and installs a new
// one. Taking the channel before reading means a record that lands between
// the read and the wait still wakes the waiter: no lost wake-ups, no polling.
type watch struct {
	mu sync.Mutex
	ch chan struct{}
	// gen counts fires: a read that found a range at its durable end stays
	// true while gen has not moved.
	gen uint64
	// reads is the topic's read state shared by its readers (see
	// topicReads); nil until the first read.
	reads *topicReads
	// waiters counts the readers sleeping on it now: while there are, a
	// cluster node keeps its interest in the topic registered with the
	// nodes that write it (cluster_watch.go).
	waiters int
	// polls counts the long polls among the waiters: the readers a fire
	// puts in its herd (sharedPages), as each reads once more after it and
	// says so. Subscriptions sleep too but never read a shared page.
	polls int
	// shared holds the pages read by readers woken by the last fire, so
	// that those woken at the same position read it once (sharedPages).
	shared sharedPages
}

func newWatch() *watch { return &watch{ch: make(chan struct{})} }

// seen is a topic's watch and the number of its fires when a reader took
// it, before reading: reads under it know which appends they may have missed.
type seen struct {
	w   *watch
	gen uint64
	// woke says a fire woke the reader before this read (it is in a herd,
	// pollAsleep.wake): its read may be shared with the others woken at
	// the same position (readShared).
	woke bool
}

// waitGen returns the channel the next fire closes and the fires so far.
func (w *watch) waitGen() (<-chan struct{}, seen) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch, seen{w: w, gen: w.gen}
}

// sleep counts a reader going to sleep on w (+1) or waking (-1).
func (w *watch) sleep(delta int) {
	w.mu.Lock()
	w.waiters += delta
	w.mu.Unlock()
}

// pollAsleep is a long poll asleep on a watch (Broker.pollSleeping).
type pollAsleep struct {
	w     *watch
	at    uint64 // the fires when it went to sleep
	awake func()
}

// wake ends the sleep and reports the fire whose herd the poll is in: the
// last fire while it slept, which counted it (fire), or none. A poll in a
// herd must say once that it has read or left (herdRead); one woken by its
// timer or its context with no fire meanwhile is in none.
func (p pollAsleep) wake() (herd uint64, in bool) {
	p.w.mu.Lock()
	p.w.polls--
	herd, in = p.w.gen, p.w.gen != p.at
	p.w.mu.Unlock()
	p.awake()
	return herd, in
}

// pollSleeping is sleeping for a long poll, which the next fire also
// counts in its herd.
func (b *Broker) pollSleeping(w *watch, topicID uint64) pollAsleep {
	w.mu.Lock()
	w.polls++
	at := w.gen
	w.mu.Unlock()
	return pollAsleep{w: w, at: at, awake: b.sleeping(w, topicID)}
}

func (w *watch) waiting() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiters > 0
}

// sleeping counts a reader asleep on w until the returned function is
// called, and asks for the topic's interest to be registered with the
// nodes writing it.
func (b *Broker) sleeping(w *watch, topicID uint64) func() {
	w.sleep(1)
	if b.data != nil {
		b.data.wantInterest(topicID)
	}
	return func() { w.sleep(-1) }
}

// fire wakes every current waiter.
func (w *watch) fire() {
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.gen++
	w.shared.reset(w.gen, w.polls)
	w.mu.Unlock()
}

// watchFor returns the topic's watch, creating it on first use.
func (b *Broker) watchFor(topicID uint64) *watch {
	b.mu.Lock()
	w, ok := b.mu.watches[topicID]
	if ok {
		b.mu.Unlock()
		return w
	}
	w = newWatch()
	b.mu.watches[topicID] = w
	b.mu.Unlock()
	// A reader that resolved the topic before it was deleted must not
	// leave a watch (and the read state hung on it) behind: DeleteTopic
	// drops the watches that exist after its metadata change, and a watch
	// made after that change is dropped here.
	var exists bool
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) { _, exists = st.TopicHeaderByID(topicID) })
	if !exists {
		b.mu.Lock()
		if b.mu.watches[topicID] == w {
			delete(b.mu.watches, topicID)
		}
		b.mu.Unlock()
		w.fire()
	}
	return w
}

// A fire wakes every reader asleep on the topic at once, and after a
// produce most of them stand at the same position: long polls at the head
// of the topic. Each would read the same page from the store and encode
// the same answer. sharedPages lets the readers woken by one fire that ask
// for the same page (same position, same bounds) read it once: the first
// reads, the others wait for its page and take it. The page is the one a
// reader alone would have read a moment earlier, under the same fire:
// fewer records at most, never a wrong one, and its cursor says exactly
// what it holds.
//
// Pages are kept for the readers of one fire only: the next fire drops
// them, and so does the last of the readers that fire woke once it has
// read. They are bounded: at most maxSharedKeys positions a fire, pages of
// at most maxSharedPage bytes, and sharedBudget bytes over the node,
// counted as the memory a kept page holds (ownPage); a page outside the
// bounds is read by each reader alone, as before.
type sharedPages struct {
	gen   uint64 // the fire the pages were read after
	herd  int    // readers that fire woke that have not read yet
	pages map[string]*sharedPage
	bytes int64 // charged to sharedBudget
}

const (
	maxSharedKeys = 64
	maxSharedPage = 64 << 10
)

// sharedBudget bounds the bytes of shared pages held over the node.
var (
	sharedBudget     = int64(16 << 20)
	sharedBudgetUsed atomic.Int64
)

// sharedPage is one page read once for several readers. done is closed
// once page, after and ok are set; ok false (the read failed) means
// each reads alone.
//
// A page of batches lies in pooled buffers (readHold), and every reader
// that takes it holds them until its answer is written: each has a
// reference of its own. Those waiting when the page is read get theirs
// then (waiters, prepaid); those coming later take one from keep, the
// reference the shared pages hold while they keep the page, dropped with
// them (reset) and only ever under the watch's lock.
type sharedPage struct {
	done  chan struct{}
	page  any
	after position // where the page leaves its reader
	ok    bool
	// read says page is set (under the watch's lock); waiters counts the
	// readers that began waiting before that.
	read    bool
	waiters int
	hold    *readHold // the page's buffers (prepaid holds are made from it)
	keep    *readHold // the shared pages' own reference, while kept
}

// reset drops the pages of the last fire; gen is the new fire and herd
// the readers it wakes. Called with the watch's lock held.
func (sp *sharedPages) reset(gen uint64, herd int) {
	if sp.bytes > 0 {
		sharedBudgetUsed.Add(-sp.bytes)
	}
	for _, p := range sp.pages {
		p.keep.release()
	}
	*sp = sharedPages{gen: gen, herd: herd}
}

// readShared returns the page of key for a reader woken by the fire that
// at saw: read by the first such reader, which runs read, and taken by the
// others. read returns the page, the position after it and its size in
// bytes. A failed read is not shared: the others read alone. Each reader
// gets a page with its own hold on the pooled buffers (holdsReads).
func (w *watch) readShared(at seen, key string, read func() (any, position, int, error)) (any, position, error) {
	w.mu.Lock()
	sp := &w.shared
	if sp.gen != at.gen || sp.herd <= 0 {
		w.mu.Unlock()
		return readAlone(read)
	}
	if p, ok := sp.pages[key]; ok {
		var mine *readHold
		waited := !p.read
		if waited {
			p.waiters++
		} else if p.ok {
			mine = p.keep.share() // kept: keep stands while the lock is held
		}
		w.mu.Unlock()
		<-p.done
		if !p.ok {
			return readAlone(read)
		}
		if waited {
			mine = p.hold.prepaid()
		}
		return pageFor(p.page, mine), p.after.own(), nil
	}
	// herd counts this reader too: with no other left to read, there is
	// no one to keep the page for.
	if len(sp.pages) >= maxSharedKeys || sp.herd <= 1 {
		w.mu.Unlock()
		return readAlone(read)
	}
	if sp.pages == nil {
		sp.pages = make(map[string]*sharedPage)
	}
	p := &sharedPage{done: make(chan struct{})}
	sp.pages[key] = p
	w.mu.Unlock()

	page, after, size, err := read()
	hold := holdOf(page)
	kept, cost := page, 0
	ok := err == nil && size <= maxSharedPage
	if ok {
		kept, cost = ownPage(page, size)
		cost = max(cost, hold.bytes()) // what keeping it keeps from the pool
		if sharedBudgetUsed.Add(int64(cost)) > sharedBudget {
			sharedBudgetUsed.Add(-int64(cost))
			ok = false
		}
	}
	w.mu.Lock()
	p.read = true
	if err == nil { // those already waiting take it, whatever its size
		p.page, p.after, p.ok, p.hold = kept, after.own(), true, hold
		hold.retain(p.waiters) // this reader still holds it
	}
	switch {
	case ok && sp.pages[key] == p:
		sp.bytes += int64(cost)
		p.keep = hold.share()
	case sp.pages[key] == p: // not kept: later readers read alone
		delete(sp.pages, key)
	case ok: // the pages were dropped meanwhile
		sharedBudgetUsed.Add(-int64(cost))
	}
	close(p.done)
	w.mu.Unlock()
	return page, after, err
}

// pageFor is a shared page as another reader takes it: with its own hold.
func pageFor(page any, h *readHold) any {
	if p, ok := page.(holdsReads); ok {
		return p.withReads(h)
	}
	return page
}

func readAlone(read func() (any, position, int, error)) (any, position, error) {
	page, after, _, err := read()
	return page, after, err
}

// herdRead counts a reader in the herd of fire gen (pollAsleep.wake) as
// having read or left: once the last has, the fire's pages are dropped.
func (w *watch) herdRead(gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sp := &w.shared
	if sp.gen != gen || sp.herd <= 0 {
		return
	}
	sp.herd--
	if sp.herd == 0 {
		sp.reset(sp.gen, 0)
	}
}

// ownPage copies a page that is to be kept for other readers into memory
// of its own and returns the copy and the bytes it holds. A page as read
// points into the store's read buffers: a record of a few bytes keeps the
// whole buffer it was decoded from alive, a megabyte for a large read, and
// the budget would count a fraction of what is held. A kind of page it
// does not know is kept as read and costs the size its reader gave.
func ownPage(page any, size int) (any, int) {
	switch p := page.(type) {
	case []Record:
		return ownRecords(p)
	case []RangeBatch:
		return ownBatches(p)
	}
	return page, size
}

func ownRecords(recs []Record) ([]Record, int) {
	n, headers := 0, 0
	for _, r := range recs {
		n += len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
		headers += len(r.Headers)
	}
	buf := make([]byte, 0, n)
	hs := make([]segment.Header, 0, headers)
	out := make([]Record, len(recs))
	for i, r := range recs {
		out[i] = r
		buf, out[i].Key = appendOwn(buf, r.Key)
		buf, out[i].Value = appendOwn(buf, r.Value)
		if r.Headers == nil {
			continue
		}
		from := len(hs)
		for _, h := range r.Headers {
			var c segment.Header
			buf, c.Key = appendOwn(buf, h.Key)
			buf, c.Value = appendOwn(buf, h.Value)
			hs = append(hs, c)
		}
		out[i].Headers = hs[from:len(hs):len(hs)]
	}
	cost := n + len(out)*int(unsafe.Sizeof(Record{})) + len(hs)*int(unsafe.Sizeof(segment.Header{}))
	return out, cost
}

func ownBatches(bs []RangeBatch) ([]RangeBatch, int) {
	n := 0
	for _, b := range bs {
		n += len(b.Batch)
	}
	buf := make([]byte, 0, n)
	out := make([]RangeBatch, len(bs))
	for i, b := range bs {
		out[i].Range = b.Range
		buf, out[i].Batch = appendOwn(buf, b.Batch)
	}
	return out, n + len(out)*int(unsafe.Sizeof(RangeBatch{}))
}

// appendOwn copies b to the end of buf, which has room for it, and
// returns buf and the copy; nil stays nil (no key, a tombstone).
func appendOwn(buf, b []byte) ([]byte, []byte) {
	if b == nil {
		return buf, nil
	}
	from := len(buf)
	buf = append(buf, b...)
	return buf, buf[from:len(buf):len(buf)]
}

// Kinds of page, for pageKey.
const (
	pageRecords byte = iota + 1
	pageBatches
)

// recordsSize is the bytes of a page of records, for maxSharedPage.
func recordsSize(recs []Record) int {
	n := 0
	for _, r := range recs {
		n += len(r.Key) + len(r.Value) + 32
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
	}
	return n
}

// pageKey identifies what a read asks for: the kind of page, its bounds
// and the reader's position. Every part is a fixed byte or a uvarint, and
// the ranges read are a tag (every range, or a list) then the list with its
// length first, so two keys are equal only if every part is.
func pageKey(kind byte, pos position, records, bytes int) string {
	const everyRange, rangeList = 0, 1
	k := make([]byte, 0, 16+len(pos.only)*4+len(pos.entries)*16)
	k = append(k, kind)
	k = binary.AppendUvarint(k, uint64(records))
	k = binary.AppendUvarint(k, uint64(bytes))
	if pos.only == nil {
		k = append(k, everyRange)
	} else {
		k = append(k, rangeList)
		k = binary.AppendUvarint(k, uint64(len(pos.only)))
		for _, r := range pos.only {
			k = binary.AppendUvarint(k, r)
		}
	}
	k = binary.AppendUvarint(k, pos.resume) // where the page starts
	for _, e := range pos.entries {
		k = binary.AppendUvarint(k, e.Source)
		k = binary.AppendUvarint(k, e.SliceStart)
		k = append(k, e.SliceBits)
		k = binary.AppendUvarint(k, e.Offset)
	}
	return string(k)
}
