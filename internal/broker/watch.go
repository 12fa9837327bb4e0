package broker

import "sync"

// watch is a broadcast latch per topic: waiters take the current channel
// before they read, and every durable append closes it and installs a new
// one. Taking the channel before reading means a record that lands between
// the read and the wait still wakes the waiter: no lost wake-ups, no polling.
type watch struct {
	mu sync.Mutex
	ch chan struct{}
}

func newWatch() *watch { return &watch{ch: make(chan struct{})} }

// wait returns the channel the next fire closes.
func (w *watch) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

// fire wakes every current waiter.
func (w *watch) fire() {
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}

// watchFor returns the topic's watch, creating it on first use.
func (b *Broker) watchFor(topicID uint64) *watch {
	b.mu.Lock()
	defer b.mu.Unlock()
	w, ok := b.mu.watches[topicID]
	if !ok {
		w = newWatch()
		b.mu.watches[topicID] = w
	}
	return w
}
