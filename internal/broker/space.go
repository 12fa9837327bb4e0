package broker

import (
	"context"
	"time"

	"github.com/malachi-log/malachi/internal/storage"
)

// spaceLoop checks a single node's disk every diskCheckInterval: only
// CheckSpace takes a full store out of that state, and lets a round that
// waits for space go on. A node in a cluster checks in diskLoop, which
// also publishes the state and rolls its segments away. It runs beside
// the maintenance loop, never on it, because a roll's seal there can wait
// behind the very round this check lets go on. The ticker is the wall
// clock's, as diskLoop's: free space does not follow a test's clock.
func (b *Broker) spaceLoop(ctx context.Context) {
	defer b.done.Done()
	t := time.NewTicker(diskCheckInterval)
	defer t.Stop()
	state := storage.DiskOK
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if st := b.store.CheckSpace(); st != state {
			b.log.Warn("segment disk state changed", "from", state.String(), "to", st.String())
			state = st
		}
	}
}
