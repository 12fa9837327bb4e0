package peer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Config is a transport's identity and bounds. Zero values take the
// defaults; NewTCP and MemNetwork.NewTransport refuse a configuration
// out of range.
type Config struct {
	// NodeID is this node's id (raft's); required, not 0.
	NodeID uint64
	// ClusterID names the cluster; a peer of another cluster is refused
	// at the handshake. Default "malachi", at most 255 bytes.
	ClusterID string
	// ListenAddr is where TCPTransport listens (--peer-listen); default
	// 127.0.0.1:4042. The in-memory twin ignores it.
	ListenAddr string
	// TLS turns mutual TLS on: it must hold a certificate, RootCAs and
	// ClientCAs, and require and verify client certificates (see
	// LoadMutualTLS). Both directions then verify the other side, and
	// each side's certificate must name its node id (see NodeIDOf): the
	// acceptor refuses a hello whose node id the dialler's certificate
	// does not name, and the dialler an acceptor whose certificate does
	// not name the node it dialled. GetConfigForClient is refused (it
	// could drop verification per connection), as is a MinVersion below
	// TLS 1.2.
	TLS *tls.Config
	// TLSAnyNodeID turns the node id check off: any certificate the CA
	// signed may then claim any node id. Only for certificates made
	// before node ids were bound to them; replace those.
	TLSAnyNodeID bool

	// MaxFrameBytes bounds a frame after its length prefix (header and
	// payload); larger frames are refused when sent and when received.
	// Default 16 MiB, between 4 KiB and 1 GiB.
	MaxFrameBytes int
	// MaxQueueBytes and MaxQueueFrames bound what waits to be written to
	// one destination (and the answers waiting for one source); beyond
	// them Send returns ErrBackpressure. The batch being written is not
	// counted, so a destination holds at most twice this in memory.
	// Defaults 64 MiB (at least MaxFrameBytes) and 8192.
	MaxQueueBytes  int
	MaxQueueFrames int
	// MaxCallsInFlight bounds the calls waiting for answers from one
	// destination; default 1024.
	MaxCallsInFlight int
	// MaxHandlers bounds call handlers running at once, and
	// MaxHandlersPerNode those for one source node; a request beyond
	// them is answered CodeBusy. Defaults 256 and 64.
	MaxHandlers        int
	MaxHandlersPerNode int
	// MaxInboundConns bounds accepted connections, handshaking or not;
	// default 256.
	MaxInboundConns int

	// DialTimeout bounds a dial, HandshakeTimeout the TLS and peer
	// handshakes after it, WriteTimeout one batched write (a peer that
	// stops reading loses its connection after it). Defaults 5 s, 5 s,
	// 10 s.
	DialTimeout      time.Duration
	HandshakeTimeout time.Duration
	WriteTimeout     time.Duration
	// FrameReadTimeout bounds the read of one frame once its length
	// prefix has arrived: a peer that starts a frame and stalls loses its
	// connection after it. An idle connection has no read deadline (a
	// call's answer may take long). Default 30 s.
	FrameReadTimeout time.Duration
	// RedialMin and RedialMax bound the jittered, doubling wait between
	// failed connection attempts to one node. Defaults 50 ms and 2 s.
	RedialMin time.Duration
	RedialMax time.Duration

	// TraceContext turns trace contexts on frames on: SendContext and
	// Call carry ctx's trace context to the nodes that declared at the
	// handshake that they take it, and handlers receive the context a
	// frame carried. Off (a node that does not trace), frames carry
	// none, whatever ctx holds, and received ones are ignored: such a
	// node neither declares the capability nor passes a remote trace
	// on. The in-memory twin's links always take it.
	TraceContext bool

	// Logger receives connection-level messages; default slog.Default().
	Logger *slog.Logger
}

const (
	minFrameBytes = 4 << 10
	maxFrameBytes = 1 << 30
)

func (c Config) withDefaults() Config {
	if c.ClusterID == "" {
		c.ClusterID = "malachi"
	}
	if c.ListenAddr == "" {
		c.ListenAddr = "127.0.0.1:4042"
	}
	defaultInt(&c.MaxFrameBytes, 16<<20)
	defaultInt(&c.MaxQueueBytes, max(64<<20, c.MaxFrameBytes))
	defaultInt(&c.MaxQueueFrames, 8192)
	defaultInt(&c.MaxCallsInFlight, 1024)
	defaultInt(&c.MaxHandlers, 256)
	defaultInt(&c.MaxHandlersPerNode, min(64, c.MaxHandlers))
	defaultInt(&c.MaxInboundConns, 256)
	defaultDuration(&c.DialTimeout, 5*time.Second)
	defaultDuration(&c.HandshakeTimeout, 5*time.Second)
	defaultDuration(&c.WriteTimeout, 10*time.Second)
	defaultDuration(&c.FrameReadTimeout, 30*time.Second)
	defaultDuration(&c.RedialMin, 50*time.Millisecond)
	defaultDuration(&c.RedialMax, 2*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func defaultInt(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

func defaultDuration(v *time.Duration, d time.Duration) {
	if *v == 0 {
		*v = d
	}
}

// validate reports the first setting out of range, after defaults.
func (c Config) validate() error {
	switch {
	case c.NodeID == 0:
		return errors.New("peer: NodeID is required")
	case len(c.ClusterID) > 255:
		return errors.New("peer: ClusterID is longer than 255 bytes")
	case c.MaxFrameBytes < minFrameBytes || c.MaxFrameBytes > maxFrameBytes:
		return fmt.Errorf("peer: MaxFrameBytes %d is outside [%d, %d]", c.MaxFrameBytes, minFrameBytes, maxFrameBytes)
	case c.MaxQueueBytes < c.MaxFrameBytes:
		return fmt.Errorf("peer: MaxQueueBytes %d is below MaxFrameBytes %d", c.MaxQueueBytes, c.MaxFrameBytes)
	case c.MaxQueueFrames < 1, c.MaxCallsInFlight < 1, c.MaxInboundConns < 1:
		return errors.New("peer: MaxQueueFrames, MaxCallsInFlight and MaxInboundConns must be at least 1")
	case c.MaxHandlers < 1 || c.MaxHandlersPerNode < 1 || c.MaxHandlersPerNode > c.MaxHandlers:
		return errors.New("peer: need 1 <= MaxHandlersPerNode <= MaxHandlers")
	case c.DialTimeout < 0, c.HandshakeTimeout < 0, c.WriteTimeout < 0, c.FrameReadTimeout < 0:
		return errors.New("peer: timeouts cannot be negative")
	case c.RedialMin <= 0 || c.RedialMax < c.RedialMin:
		return errors.New("peer: need 0 < RedialMin <= RedialMax")
	}
	return checkMutualTLS(c.TLS)
}
