// Package peer is the node-to-node transport of a Malachi cluster: raft
// messages, forwarded metadata requests and segment replication travel
// over it. It offers two primitives on numbered channels: Send, one-way,
// ordered per destination and channel, never blocking (a full queue is
// refused with ErrBackpressure, which raft treats as a drop); and Call,
// a request answered by id, many in flight over one connection.
// TCPTransport is the real transport; MemNetwork builds in-memory twins
// with fault controls for tests of the packages above. Both satisfy
// Transport. The package does not import the broker, which drives it.
//
// # Connections
//
// Each node dials each destination once, lazily, and keeps the
// connection; after a failure it dials again after a jittered wait that
// doubles from RedialMin up to RedialMax. A connection carries the
// dialler's one-way frames and requests, and the acceptor's answers to
// those requests. Frames waiting for a destination are written together,
// in one writev (TCP) or a few large records (TLS): under load, raft's
// per-cycle frames, calls and replication batches to one node share
// writes. Every connection failure fails the calls in flight on it with
// ErrConnectionLost (the request was written and may have run) or
// ErrUnreachable (it was not); delivery is at most once.
//
// With Config.TLS both sides present certificates and verify the
// other's against the configured CA (LoadMutualTLS); a dialled peer's
// certificate must also name the host it was dialled at. Each side's
// certificate must name its node id, as the URI subject alternative name
// malachi-node://<id> (NodeURI) or the subject common name node-<id>:
// the acceptor refuses a hello whose node id the dialler's certificate
// does not name, and the dialler an acceptor whose certificate does not
// name the node it meant to reach, so a certificate of the cluster's CA
// cannot speak for another node (Config.TLSAnyNodeID turns this off, for
// certificates made before). A configuration that could skip
// verification (GetConfigForClient, versions below TLS 1.2) is refused.
//
// A node's frames reach one handler at a time, in order. When a source
// dials again (its old connection failed, as it sees it), the acceptor
// closes the old connection and waits for its reader to leave the
// handler it may be in before the new connection delivers anything;
// frames the old connection still held are dropped, like any frame of
// a failed connection.
//
// # Frame format
//
// All integers are big-endian.
//
//	0       4       8      9      10     12              20
//	+-------+-------+------+------+------+---------------+-----------
//	| len   | crc   | kind | chan | flags| request id    | payload ...
//	+-------+-------+------+------+------+---------------+-----------
//
//	len        uint32  bytes after this field: 16 + payload; at most
//	                   Config.MaxFrameBytes, refused (connection closed)
//	                   when larger, on both sides
//	crc        uint32  CRC32C (Castagnoli) of every byte after it; a
//	                   mismatch closes the connection, the frame is
//	                   counted (Stats.CorruptFrames) and not delivered
//	kind       uint8   1 hello, 2 hello answer, 3 one-way message,
//	                   4 request, 5 response, 6 error response
//	chan       uint8   Channel (1 raft, 2 forward, 3 replication, 4 data; below
//	                   16); 0 on hello and answers
//	flags      uint16  0, or 1 (trace): the payload starts with a trace
//	                   context; other values are refused
//	request id uint64  a call's id, unique among the caller's calls to
//	                   that node; answers carry it back; 0 otherwise
//
// A frame with the trace flag carries the W3C trace context of the span
// that sent it ahead of its payload, 25 bytes counted in len:
//
//	trace id [16] | span id [8] | trace flags uint8 (1: sampled)
//
// A request made by Call, and a one-way frame sent by SendContext, carry
// it when their context has a span, Config.TraceContext is set and the
// destination declared capTrace in its hello answer; a frame without one
// is the frame of version 1 as before, byte for byte. A node that
// predates the flag refuses a traced frame and closes the connection,
// and declares nothing, so it is sent none: frames queued with a context
// before its handshake said so are written without it. A zero trace or
// span id is refused. The receiver, when Config.TraceContext is set,
// hands the context to the call handler, or the ContextHandler, as the
// remote parent of what it does; otherwise it drops it, so that a node
// that does not trace passes no remote parent on.
//
// The dialler's first frame is a hello, whose payload is
//
//	"MLPR" | version uint16 | from node uint64 | to node uint64 |
//	cluster id length uint8 | cluster id
//
// and the acceptor answers with a hello answer,
//
//	version uint16 | node uint64 | ok uint8 (1 accepted, 0 refused) |
//	capabilities uint8 (when accepted) | reason (text, when refused)
//
// Capability bit 1 (capTrace) says the acceptor takes trace contexts (it
// has Config.TraceContext set). The hello cannot grow: an acceptor of
// version 1 wants its exact length. The answer can: a dialler of version
// 1 reads the first 11 bytes of an accepting one, and an answer without
// the byte, from such an acceptor, declares no capability.
//
// The acceptor refuses another protocol version, another cluster id, a
// hello addressed to another node id, and node id 0; the dialler refuses
// an answer from a node other than the one it meant to reach (the
// address now belongs to someone else). Both handshakes (TLS, then the
// hello) must finish within HandshakeTimeout. After them a connection
// may stay idle, but a frame whose length prefix has arrived must arrive
// whole within FrameReadTimeout. An error response's payload is an
// ErrorCode byte followed by text.
//
// # Bounds
//
// Per destination: MaxQueueFrames and MaxQueueBytes of frames waiting to
// be written (Send and Call refuse beyond them), MaxCallsInFlight calls
// waiting (ErrTooManyCalls). Per node: MaxHandlers call handlers at once,
// MaxHandlersPerNode of them for one source (a request beyond them is
// answered CodeBusy, ErrBusy to the caller); MaxInboundConns accepted
// connections. A frame's buffer grows with the bytes received (from
// 64 KiB, doubling), so a peer that announces a large frame and stalls
// holds little memory until FrameReadTimeout closes its connection. A
// source whose answers pile up past the queue bound is
// not reading them and loses its connection; a destination that stops
// reading loses its connection after WriteTimeout.
//
// # Payloads
//
// Send and Call copy what they are given (into the frame, which is
// encoded at once), so callers may reuse their buffers. Handlers own the
// payloads they receive: each frame is read into a buffer of its own.
//
// # Goroutines
//
// A TCPTransport runs, each with its owner and its exit:
//   - the accept loop: owned by the transport, started by Start; returns
//     when Close closes the listener.
//   - one writer per destination (dest.run): owned by the transport,
//     started by the first Send or Call to the node; dials, writes
//     batches, redials; returns on RemoveNode or Close.
//   - one answer reader per outbound connection: owned by its writer,
//     which waits for it; returns when the connection closes.
//   - one reader per accepted connection (serveInbound): owned by the
//     transport; runs the handshakes, delivers one-way frames inline
//     (handlers must not block) and dispatches requests; returns when
//     the connection fails or Close closes it.
//   - one answer writer per accepted connection: owned by its reader,
//     which waits for it; returns when the reader closes its queue.
//   - one goroutine per running call handler, at most MaxHandlers:
//     owned by the transport; returns with the handler, whose context
//     ends with the connection or Close.
//
// Close closes the listener and every connection, fails waiting calls
// with ErrClosed and waits for all of the above. A MemTransport runs one
// delivery goroutine per destination and per caller it answers, and one
// per running call handler, and Close waits for them likewise; closing
// one fails the calls other transports have in flight to it, as a
// dropped connection does.
package peer
