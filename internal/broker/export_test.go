package broker

// SleepingReaders is how many readers of topic sleep on this node now.
func (b *Broker) SleepingReaders(topic string) int {
	id, err := b.topicID(topic)
	if err != nil {
		return 0
	}
	b.mu.Lock()
	w := b.mu.watches[id]
	b.mu.Unlock()
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiters
}
