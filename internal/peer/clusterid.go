package peer

import "errors"

// SetClusterID replaces Config.ClusterID, for a node that learns its
// cluster's id after NewTCP (a joining node learns it from gossip, which
// needs the peer address Listen bound first). It must be called before
// Start and before any Send or Call: the handshakes read the id without a
// lock. "" means the default.
func (t *TCPTransport) SetClusterID(id string) error {
	if id == "" {
		id = Config{}.withDefaults().ClusterID
	}
	if len(id) > 255 {
		return errors.New("peer: ClusterID is longer than 255 bytes")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.mu.closed:
		return ErrClosed
	case t.mu.started || len(t.mu.dests) > 0:
		return errors.New("peer: the cluster id is set before the transport starts or sends")
	}
	t.cfg.ClusterID = id
	return nil
}
