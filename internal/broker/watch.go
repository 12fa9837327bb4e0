package broker

import (
	"sync"

	"github.com/malachi-log/malachi/internal/metadata"
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
}

func newWatch() *watch { return &watch{ch: make(chan struct{})} }

// seen is a topic's watch and the number of its fires when a reader took
// it, before reading: reads under it know which appends they may have missed.
type seen struct {
	w   *watch
	gen uint64
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
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) { _, exists = st.TopicByID(topicID) })
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
