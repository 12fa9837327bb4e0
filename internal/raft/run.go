package raft

import (
	"context"
	"errors"
)

// maxCyclesPerWake bounds the cycles Run makes for one wake-up, so a busy
// host still notices its ticks and ctx; leftover work re-signals itself.
const maxCyclesPerWake = 8

var errRunning = errors.New("raft: Run already running")

// Run drives the host: it ticks every Options.TickInterval on
// Options.Clock and runs Process whenever there is work (a tick, a
// proposal, a read, a received frame). It is the host's only goroutine,
// owned by the caller; it returns when ctx ends (nil) or when the host
// stops on a failed Save (that error). Requests still waiting then fail
// with ErrStopped.
func (h *Host) Run(ctx context.Context) error {
	h.mu.Lock()
	if h.running {
		h.mu.Unlock()
		return errRunning
	}
	h.running = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.stop(ErrStopped)
		h.mu.Unlock()
	}()

	timer := h.opts.Clock.NewTimer(h.opts.TickInterval)
	defer func() { timer.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
			// Re-arm first: work between ticks must not delay them.
			timer = h.opts.Clock.NewTimer(h.opts.TickInterval)
			h.Tick()
		case <-h.work:
		}
		if err := h.drain(); err != nil {
			return err
		}
	}
}

func (h *Host) drain() error {
	for range maxCyclesPerWake {
		more, err := h.Process()
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
	h.signal()
	return nil
}
