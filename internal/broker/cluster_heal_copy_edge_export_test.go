package broker

import "context"

// CopyCall answers a copy call as this node's transport would hand it
// one from peer from.
func (b *Broker) CopyCall(ctx context.Context, from uint64, req []byte) ([]byte, error) {
	return b.serveCopy(ctx, from, req)
}
