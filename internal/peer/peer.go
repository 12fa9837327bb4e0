package peer

import (
	"context"
	"errors"
	"fmt"
)

// Channel names a stream of frames between two nodes. Frames of one
// channel to one destination are delivered in the order they were sent;
// channels are independent in meaning but share the connection.
type Channel uint8

// The channels in use. Values are part of the frame format: never
// renumber them.
const (
	// ChannelRaft carries batched raft messages, one-way.
	ChannelRaft Channel = 1
	// ChannelForward carries client metadata requests forwarded to a
	// vnode leader, as calls.
	ChannelForward Channel = 2
	// ChannelReplication carries segment batches to followers.
	ChannelReplication Channel = 3
	// ChannelData carries the data path between nodes: produces
	// forwarded to the node writing a range, reads of another node's
	// segments (calls), and append notifications (one-way).
	ChannelData Channel = 4
)

// NumChannels bounds the channel numbers: a Channel is valid when it is
// at least 1 and below NumChannels.
const NumChannels = 16

func (c Channel) valid() bool { return c >= 1 && c < NumChannels }

func (c Channel) String() string {
	switch c {
	case ChannelRaft:
		return "raft"
	case ChannelForward:
		return "forward"
	case ChannelReplication:
		return "replication"
	case ChannelData:
		return "data"
	}
	return fmt.Sprintf("channel-%d", uint8(c))
}

// Handler receives one-way frames of a channel. It runs on the goroutine
// that reads the source's connection, one frame at a time, in order; it
// must not block (hand the payload to a loop of your own). The payload
// belongs to the handler, which may keep it.
type Handler func(from uint64, payload []byte)

// ContextHandler is a Handler that also receives the trace context the
// frame carried (SendContext), as the remote span of ctx; ctx is
// context.Background() when the frame carried none. It must not block
// either.
type ContextHandler func(ctx context.Context, from uint64, payload []byte)

// CallHandler answers requests of a channel. It runs on a goroutine of a
// bounded pool and may block; ctx is cancelled when the connection the
// request came on closes or the transport closes. An error it returns
// reaches the caller as a *RemoteError carrying its text. The request
// belongs to the handler; the response is copied before it returns.
type CallHandler func(ctx context.Context, from uint64, req []byte) ([]byte, error)

// Transport moves frames between the nodes of a cluster. TCPTransport is
// the real one; MemNetwork makes in-memory twins for tests. Delivery is at
// most once: a frame may be lost when a connection fails, never
// duplicated, and frames of one channel to one destination never overtake
// each other.
//
// Handle and HandleCall are called before Start; every other method is
// safe for concurrent use.
type Transport interface {
	// ID is this node's id.
	ID() uint64
	// Handle registers the one-way handler of ch. It fails after Start or
	// when ch already has one.
	Handle(ch Channel, h Handler) error
	// HandleContext is Handle for a handler that receives the trace
	// context a frame carried.
	HandleContext(ch Channel, h ContextHandler) error
	// HandleCall registers the call handler of ch. It fails after Start
	// or when ch already has one. A request sent by a Call whose ctx
	// carried a trace context reaches the handler with it as ctx's
	// remote span.
	HandleCall(ch Channel, h CallHandler) error
	// Start begins accepting frames from other nodes.
	Start() error
	// SetAddr records (or changes) where node listens. A changed address
	// drops the connection to the old one.
	SetAddr(node uint64, addr string)
	// RemoveNode forgets node: its queue is dropped, its calls fail with
	// ErrUnknownNode, its connection closes.
	RemoveNode(node uint64)
	// Send queues payload for to on ch and returns at once. Send copies
	// payload: the caller may reuse it as soon as Send returns. It
	// returns ErrBackpressure when to's queue is full, ErrFrameTooLarge
	// when the frame exceeds the configured bound, ErrUnknownNode when
	// to has no address, ErrClosed after Close.
	Send(to uint64, ch Channel, payload []byte) error
	// SendContext is Send, and the frame carries ctx's trace context
	// (trace id, span id, flags), when it has one, to the receiver's
	// ContextHandler. Frames without one are as Send makes them.
	SendContext(ctx context.Context, to uint64, ch Channel, payload []byte) error
	// Call sends req to to's call handler of ch and waits for its answer
	// or for ctx. req is copied before Call returns. It fails with
	// ErrTooManyCalls when to already has the configured number of calls
	// in flight, ErrUnreachable when to could not be reached (the request
	// was not delivered), ErrConnectionLost when the connection failed
	// after the request was written (it may have run), a *RemoteError
	// when the handler failed or was refused, ctx.Err() when ctx ends
	// first, and ErrClosed when the transport closes. Cancelling ctx
	// frees the caller only: the handler is not told (there is no cancel
	// frame), and its late answer is dropped. The request carries
	// ctx's trace context, when it has one.
	Call(ctx context.Context, to uint64, ch Channel, req []byte) ([]byte, error)
	// Stats returns the counters since the transport was made.
	Stats() Stats
	// Close stops every goroutine of the transport, fails waiting calls
	// with ErrClosed, and waits for running handlers (call handlers'
	// contexts are cancelled), so it must not be called from a handler.
	Close() error
}

// Errors. Callers test them with errors.Is.
var (
	ErrBackpressure   = errors.New("peer: destination queue full")
	ErrClosed         = errors.New("peer: transport closed")
	ErrUnknownNode    = errors.New("peer: node has no address")
	ErrTooManyCalls   = errors.New("peer: too many calls in flight to node")
	ErrFrameTooLarge  = errors.New("peer: frame larger than the configured bound")
	ErrUnreachable    = errors.New("peer: node unreachable")
	ErrConnectionLost = errors.New("peer: connection lost after the request was sent")
	ErrHandshake      = errors.New("peer: handshake refused")
	ErrBusy           = errors.New("peer: node has no free call handler")
	ErrNoHandler      = errors.New("peer: no handler for channel")
	ErrBadChannel     = errors.New("peer: channel out of range")
	ErrStarted        = errors.New("peer: handlers must be registered before Start")
	ErrCorruptFrame   = errors.New("peer: frame checksum mismatch")
)

// ErrorCode says why a call failed on the node that received it.
type ErrorCode uint8

// Error codes of error responses; part of the frame format.
const (
	// CodeHandler: the handler returned an error; Message is its text.
	CodeHandler ErrorCode = 1
	// CodeBusy: the node's call handler pool was full (retriable).
	CodeBusy ErrorCode = 2
	// CodeNoHandler: no call handler is registered for the channel.
	CodeNoHandler ErrorCode = 3
	// CodeTooLarge: the response exceeded the frame bound.
	CodeTooLarge ErrorCode = 4
)

// RemoteError is a call's failure on the node that received it.
// errors.Is matches ErrBusy, ErrNoHandler and ErrFrameTooLarge for the
// codes that mean them.
type RemoteError struct {
	Node    uint64
	Code    ErrorCode
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("peer: node %d: %s", e.Node, e.Message)
}

// Is maps the refusal codes onto the package's sentinels.
func (e *RemoteError) Is(target error) bool {
	switch e.Code {
	case CodeBusy:
		return target == ErrBusy
	case CodeNoHandler:
		return target == ErrNoHandler
	case CodeTooLarge:
		return target == ErrFrameTooLarge
	}
	return false
}

// Stats are a transport's counters. A message is one frame carrying a
// payload (a one-way frame, a request or a response); Writes counts the
// batched writes that carried them, so FramesSent/Writes is the batching
// factor.
type Stats struct {
	// Nodes holds one entry per node this transport has sent to or
	// received from.
	Nodes map[uint64]NodeStats
	// HandshakeFailures counts connections, dialled or accepted, whose
	// TLS or peer handshake failed (bad certificate, version, cluster or
	// node id).
	HandshakeFailures uint64
	// CorruptFrames counts frames whose checksum did not match; each
	// closed its connection and was not delivered.
	CorruptFrames uint64
	// OversizeFrames counts frames refused for exceeding MaxFrameBytes
	// on receipt; each closed its connection.
	OversizeFrames uint64
	// ProtocolErrors counts connections closed for a frame that made no
	// sense there (an unknown kind, a response to no call).
	ProtocolErrors uint64
	// HandlersBusy counts requests refused because the handler pool, or
	// the source's share of it, was full.
	HandlersBusy uint64
	// Unhandled counts one-way frames for a channel with no handler.
	Unhandled uint64
	// ConnsRefused counts accepted connections closed at once because
	// MaxInboundConns were open.
	ConnsRefused uint64
}

// NodeStats are the counters of traffic with one node.
type NodeStats struct {
	Connected bool // an outbound connection is established
	// TraceContext: the node declared at the handshake that it takes
	// trace contexts.
	TraceContext   bool
	QueueFrames    int // frames waiting to be written
	QueueBytes     int
	CallsInFlight  int
	Writes         uint64 // batched writes to the node
	FramesSent     uint64
	BytesSent      uint64
	FramesReceived uint64
	BytesReceived  uint64
	Refused        uint64 // Send and Call refused with ErrBackpressure
	Dials          uint64
	DialFailures   uint64 // dials, TLS or peer handshakes that failed
}
