package broker

import "context"

// SweepRetention runs one retention sweep now and returns how many
// segments it deleted.
func (b *Broker) SweepRetention(ctx context.Context) int { return b.sweepRetention(ctx) }

// RollDue rolls the active segments due by their topic's policy, as the
// maintenance loop does.
func (b *Broker) RollDue() { b.rollAged() }
