package replica

// DropPrimary stops the primary of segment id running here, as Drop
// does, and answers its commit watermark as it stopped: every produce
// it ever acknowledged ends at or below it, and none is acknowledged
// after. The produces still waiting fail with ErrDropped. led is false
// (and the segment is dropped all the same) when the host runs no
// primary of id.
//
// A failover that this primary runs itself (it lost the followers its
// quorum needs) seals at the watermark rather than at the highest
// fenced copy: the appends above it were answered with a retriable
// reason, and a seal that kept them would store a record the client
// writes again (cluster_follower_roll.go).
func (h *Host) DropPrimary(id uint64) (wm uint64, led bool) {
	// Out of the table first: a read looks its bound up there
	// (Watermark), so none sees a watermark above the one answered here.
	h.mu.Lock()
	s := h.mu.segs[id]
	delete(h.mu.segs, id)
	h.mu.Unlock()
	if s == nil {
		return 0, false
	}
	s.appendMu.Lock() // no append half done: none slips past the fence
	s.mu.Lock()
	s.appendMu.Unlock()
	if s.p != nil {
		// Later appends are refused, and a quorum reached later settles
		// no produce: the waiters are taken here, under the lock that
		// settling them needs.
		s.p.Fence()
		wm, led = s.wm, true
	}
	dones := s.dones
	s.dones = nil
	s.mu.Unlock()
	for _, w := range dones {
		w.done(ErrDropped)
	}
	return wm, led
}
