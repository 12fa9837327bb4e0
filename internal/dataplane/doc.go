// Package dataplane encodes the messages the nodes of a cluster exchange
// on the data path (peer.ChannelData): produces forwarded to the node
// that writes a range, reads of a segment held by another node, and the
// interest and notifications that wake long polls and subscriptions on
// nodes other than the one that appended. It is pure: bytes in, values
// out, no I/O, no clock, no locks; the broker owns the goroutines, the
// transport and the tables.
//
// # Messages
//
// Every message starts with a Kind byte. Integers are unsigned varints
// unless said otherwise; a byte string is its length (uvarint) and its
// bytes; a text is a byte string holding UTF-8.
//
//	append    (call)     topic, range, count, count × batch (storage
//	                     batch encoding, base offset 0: the owner assigns
//	                     the offsets, W2)
//	read      (call)     segment, from, max bytes, up to
//	info      (call)     segment
//	seek      (call)     segment, time (zigzag varint, unix ms)
//	interest  (call)     ttl ms, count, count × topic
//	appended  (one-way)  count, count × (topic, range, end)
//	roll      (call)     range, segment: seal the range's active segment
//	                     for a split or merge asked of another node
//	group     (call)     op (1 byte), topic, group, member, owner (texts),
//	                     generation: a consumer-group operation for the
//	                     coordinator of the topic's groups (GroupOp)
//
// Each call is answered by a Status byte. StatusOK is followed by the
// kind's answer:
//
//	append    count, count × base offset (one per stored batch)
//	read      next, durable end, sealed (1 byte), batches (byte string)
//	info      base, durable end, records, max timestamp (zigzag), sealed
//	seek      found (1 byte), base offset
//	interest  count, count × (topic, range, end)
//	roll      the end the segment was sealed at
//	group     generation, live (1 byte), count, count × range, held,
//	          members, count, count × (name, last seen (zigzag), count,
//	          count × range), count, count × group name
//
// Any other status is followed by a Refusal: stored (uvarint: batches of
// an append enqueued before the refusal), node (a node id hint, 0 when
// none), reason (text: a wire reason) and message (text).
//
// Decoders refuse trailing bytes, truncated input, counts larger than
// the bytes left could hold, byte strings longer than MaxBytes, and names
// in group messages longer than MaxNameBytes.
package dataplane
