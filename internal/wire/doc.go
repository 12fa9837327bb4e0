// Package wire is the client protocol: frames, primitives, and the request
// and response payload of every api key. Keys 0–16 are wire v1, accepted
// byte for byte so the original clients keep working; keys 17–21 are the
// storage policy operations (policy.go), numbered as the original numbers
// them; keys 64 and up are this broker's own. docs/wire.md is the reference for client
// authors; this comment is the reference for the code.
//
// # Frames
//
// All integers are unsigned big-endian.
//
//	frame    = len:u32 body[len]
//	request  = api_key:u16 correlation_id:u32 payload
//	response = correlation_id:u32 error_code:u16 payload   (0 ok, 1 error)
//
// ReadFrame reads a body and refuses a length prefix above its limit
// before reading any of the body. ParseRequestHeader and ParseResponse
// split a body; AppendRequestFrame, AppendOKFrame and AppendErrorFrame
// build whole frames. An error response's payload is str(reason), one of
// the strings in Reasons, each marked retriable or not.
//
// # Primitives
//
//	str     = 0x00 | 0x01 len:u32 bytes[len]     absent | present (maybe empty)
//	list(x) = count:u32 x*count
//	bool    = u8 0 | 1                           (keys 64+ only)
//	record  = key:str value_len:u32 value timestamp:u64 list(str key, str value)
//
// A nullable str is a *string in request types (nil is absent) and a
// []byte in records and headers (nil is absent, []byte{} is present and
// empty). Response fields typed string must be present on the wire.
//
// # Decoding
//
// Every payload type has Decode(payload []byte) error, and DecodeRequest
// dispatches on the api key. Decoding is exact: a short payload, trailing
// bytes, a str tag other than 0 or 1, or a bool other than 0 or 1 is an
// error wrapping ErrMalformed. So every accepted payload has exactly one
// encoding, and encode(decode(x)) == x for any x that decodes.
//
// Decoders face hostile input. A list count is accepted only if that many
// items of the smallest possible size fit in the bytes that remain, and a
// length only if that many bytes remain, so a count of 2^32-1 with ten
// bytes left fails at once. A decoded item is larger in memory than its
// smallest encoding (a Header is 48 bytes, two absent strs 2), so lists
// are never preallocated for their declared count: the first allocation
// is cut to what the remaining bytes could back, and the list grows only
// as items actually decode. What a decode allocates is therefore bounded
// by the items the payload really holds, and a payload that declares
// huge counts and then fails costs at most about its own size.
//
// NB: byte slices in decoded records (keys, values, header keys and
// values) alias the payload, with their capacity capped so appending to
// one cannot overwrite its neighbour. Strings are copies. Copy the byte
// slices before reusing the payload's buffer (for example the buffer
// passed back to the next ReadFrame). ProduceRequest.Decode and
// FetchResponse.Decode reuse the capacity of their Records slice, and all
// records' headers share one backing array, so decoding a produce of n
// records costs a handful of allocations, not n.
//
// # Encoding
//
// Request and response types encode with value receivers, so both T and
// *T satisfy Request and Response; DecodeRequest returns pointers. Every
// AppendPayload appends to dst and never fails. Record.Size lets a server
// fill a fetch response up to a byte budget before encoding it, and
// AppendRecord/AppendRecords encode records without a surrounding message.
package wire
