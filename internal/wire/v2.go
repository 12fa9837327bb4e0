package wire

import "encoding/binary"

// Wire v2, keys 79–83: version negotiation and batch-native produce and
// fetch. A v2 client sends api_versions first (it is accepted before
// authentication); a v1 client never sends any of these keys and sees
// nothing new. Batches travel in the storage batch encoding of
// docs/storage-format.md, as blob = len:u32 bytes[len].

// KeyVersion is a key this node serves and the versions of its layout.
// Every layout shipped so far is version 1; a key whose layout changes
// gets a new version here, so a client can pick what both sides speak.
type KeyVersion struct {
	Key      uint16
	Min, Max uint16
}

// Versions lists every key this package encodes, ascending. A server
// answers api_versions with the keys it serves.
func Versions() []KeyVersion {
	out := make([]KeyVersion, 0, len(keyNames))
	for k := uint16(0); k < 1<<10; k++ {
		if _, ok := keyNames[k]; ok {
			out = append(out, KeyVersion{Key: k, Min: 1, Max: max(keyMaxVersion[k], 1)})
		}
	}
	return out
}

// keyMaxVersion holds the keys whose layout grew past version 1. Version
// 2 of create_topic_ex (67) takes an optional policy name; of
// describe_group (70), fetch_batches (82) and subscribe_batches (83), an
// optional flags byte asking for skips; of describe_topic (65) and
// cluster_status (87), an optional flags byte asking for the repair views
// (repair.go); version 3 of describe_topic takes a page token and size
// (describepage.go). Every version-1 encoding still decodes as before, so Min
// stays 1; a client sends the new fields only to a node that serves
// version 2.
var keyMaxVersion = map[uint16]uint16{
	KeyCreateTopicEx: 2, KeyDescribeGroup: 2, KeyFetchBatches: 2, KeySubscribeBatches: 2,
	KeyDescribeTopic: 3, KeyClusterStatus: 2,
}

func newV2Request(key uint16) requestDecoder {
	switch key {
	case KeyAPIVersions:
		return new(APIVersionsRequest)
	case KeyTopicRoutes:
		return new(TopicRoutesRequest)
	case KeyProduceBatches:
		return new(ProduceBatchesRequest)
	case KeyFetchBatches:
		return new(FetchBatchesRequest)
	case KeySubscribeBatches:
		return new(SubscribeBatchesRequest)
	case KeySessionAuth:
		return new(SessionAuthRequest)
	}
	return newMemberRequest(key)
}

func appendU16(dst []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(dst, v) }

func (d *decoder) u16() uint16 {
	if b := d.take(2, "u16"); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

// blob reads len:u32 bytes[len], aliasing the input; never nil.
func (d *decoder) blob() []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	b := d.take(uint64(n), "blob")
	if b == nil {
		return nil
	}
	return b
}

func appendBlob(dst, b []byte) []byte {
	return append(appendU32(dst, uint32(len(b))), b...)
}

// APIVersionsRequest (key 79) has an empty payload and may be sent before
// authenticating; APIVersionsResponse answers it.
type APIVersionsRequest struct{}

func (APIVersionsRequest) APIKey() uint16                  { return KeyAPIVersions }
func (APIVersionsRequest) AppendPayload(dst []byte) []byte { return dst }
func (*APIVersionsRequest) Decode(payload []byte) error {
	return decodeEmpty(payload, "api_versions")
}

// APIVersionsResponse answers api_versions (79):
// list(key:u16 min:u16 max:u16) max_frame:u32 max_batch_bytes:u32
// max_batch_records:u32 str(node_version). The limits are what a producer
// must stay within: the largest request frame after authentication, and
// the largest raw records section and record count of one batch.
type APIVersionsResponse struct {
	Keys            []KeyVersion
	MaxFrame        uint32
	MaxBatchBytes   uint32
	MaxBatchRecords uint32
	NodeVersion     string
}

func (r APIVersionsResponse) AppendPayload(dst []byte) []byte {
	dst = appendU32(dst, uint32(len(r.Keys)))
	for _, k := range r.Keys {
		dst = appendU16(appendU16(appendU16(dst, k.Key), k.Min), k.Max)
	}
	dst = appendU32(appendU32(appendU32(dst, r.MaxFrame), r.MaxBatchBytes), r.MaxBatchRecords)
	return appendString(dst, r.NodeVersion)
}

func (r *APIVersionsResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = APIVersionsResponse{}
	r.Keys = list(&d, 6, func() KeyVersion { return KeyVersion{Key: d.u16(), Min: d.u16(), Max: d.u16()} })
	r.MaxFrame, r.MaxBatchBytes, r.MaxBatchRecords = d.u32(), d.u32(), d.u32()
	r.NodeVersion = d.str()
	return d.finish("api_versions response")
}

// Serves reports whether the node serves key at version v.
func (r APIVersionsResponse) Serves(key, v uint16) bool {
	for _, k := range r.Keys {
		if k.Key == key {
			return v >= k.Min && v <= k.Max
		}
	}
	return false
}

// TopicRoutesRequest (key 80): str(topic). TopicRoutesResponse answers
// with the topic's active ranges, so a producer can build one batch per
// range. Needs the produce or consume permission on the topic.
type TopicRoutesRequest struct{ Topic *string }

func (TopicRoutesRequest) APIKey() uint16 { return KeyTopicRoutes }

func (r TopicRoutesRequest) AppendPayload(dst []byte) []byte { return appendNStr(dst, r.Topic) }

func (r *TopicRoutesRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = TopicRoutesRequest{Topic: d.nstr()}
	return d.finish("topic_routes")
}

// TopicRoutesResponse answers topic_routes (80):
// bits:u8 list(range:u64 start:u64 end:u64). A key's position is the top
// bits of its xxhash64 (docs/wire.md); the range whose [start, end)
// holds it takes the key. Ranges are ascending by start and tile the
// keyspace.
type TopicRoutesResponse struct {
	Bits   uint8
	Ranges []RouteRange
}

// RouteRange is one active range of a topic and its key positions.
type RouteRange struct{ Range, Start, End uint64 }

func (r TopicRoutesResponse) AppendPayload(dst []byte) []byte {
	dst = appendU32(appendU8(dst, r.Bits), uint32(len(r.Ranges)))
	for _, rr := range r.Ranges {
		dst = appendU64(appendU64(appendU64(dst, rr.Range), rr.Start), rr.End)
	}
	return dst
}

func (r *TopicRoutesResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = TopicRoutesResponse{Bits: d.u8()}
	r.Ranges = list(&d, 24, func() RouteRange { return RouteRange{Range: d.u64(), Start: d.u64(), End: d.u64()} })
	return d.finish("topic_routes response")
}

// RangeBatch is one stored-format batch and the range it is for: in a
// produce, the range the producer routed it to; in a fetch, the range
// whose history it comes from.
type RangeBatch struct {
	Range uint64
	Batch []byte
}

// minBatchLen is the size of a storage batch's header, the smallest a
// batch can be: a list of batches is refused before allocating for it
// unless that many such batches fit in the payload.
const (
	minBatchLen      = 56
	minRangeBatchLen = 8 + 4 + minBatchLen
)

func appendRangeBatches(dst []byte, bs []RangeBatch) []byte {
	dst = appendU32(dst, uint32(len(bs)))
	for _, b := range bs {
		dst = appendBlob(appendU64(dst, b.Range), b.Batch)
	}
	return dst
}

func (d *decoder) rangeBatches(dst []RangeBatch) []RangeBatch {
	n := d.count(minRangeBatchLen)
	dst = dst[:0]
	for range n {
		rb := RangeBatch{Range: d.u64(), Batch: d.blob()}
		if d.err == nil && len(rb.Batch) < minBatchLen {
			d.fail("batch of %d bytes, shorter than a batch header", len(rb.Batch))
		}
		if d.err != nil {
			return dst[:0]
		}
		dst = append(dst, rb)
	}
	return dst
}

// ProduceBatchesRequest (key 81): str(topic) list(range:u64 blob(batch)).
// Each batch is in the storage encoding, its offsets 0..count-1 (the node
// assigns the base). ProduceBatchesResponse answers once every record is
// durable. Batch slices alias the payload.
type ProduceBatchesRequest struct {
	Topic   *string
	Batches []RangeBatch
}

func (ProduceBatchesRequest) APIKey() uint16 { return KeyProduceBatches }

func (r ProduceBatchesRequest) AppendPayload(dst []byte) []byte {
	return appendRangeBatches(appendNStr(dst, r.Topic), r.Batches)
}

// AppendProduceBatchesPayload appends ProduceBatchesRequest's payload
// for n batches, the i-th for range rangeOf(i), appended in place by
// appendBatch(i, dst): for a producer that writes each batch straight
// into the frame rather than into a buffer of its own first.
func AppendProduceBatchesPayload(dst []byte, topic *string, n int, rangeOf func(int) uint64, appendBatch func(int, []byte) []byte) []byte {
	dst = appendU32(appendNStr(dst, topic), uint32(n))
	for i := range n {
		dst = appendU64(dst, rangeOf(i))
		at := len(dst)
		dst = appendBatch(i, appendU32(dst, 0))
		binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	}
	return dst
}

// Decode reuses the capacity of r.Batches.
func (r *ProduceBatchesRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	r.Topic = d.nstr()
	r.Batches = d.rangeBatches(r.Batches)
	return d.finish("produce_batches")
}

// ProduceBatchesResponse answers produce_batches (81): count:u32
// rerouted:u32. Count is the records stored; rerouted is how many batches
// the node had to route record by record because their range had split
// or merged, or held keys outside it: the producer's routes are stale.
type ProduceBatchesResponse struct{ Count, Rerouted uint32 }

func (r ProduceBatchesResponse) AppendPayload(dst []byte) []byte {
	return appendU32(appendU32(dst, r.Count), r.Rerouted)
}

func (r *ProduceBatchesResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ProduceBatchesResponse{Count: d.u32(), Rerouted: d.u32()}
	return d.finish("produce_batches response")
}

// FetchBatchesRequest (key 82): str(topic) str(cursor) str(group)
// str(member) max_bytes:u32 max_records:u32 wait_ms:u32 [flags:u8].
// Position precedence is fetch's (key 3). MaxBytes bounds the page (0 =
// the node's default; the first batch is whole regardless); MaxRecords,
// when not 0, is exact: the page ends inside a batch rather than pass it.
// Flags is sent only when not zero; FlagSkips asks each answer to end
// with a skip report.
type FetchBatchesRequest struct {
	Topic, Cursor, Group, Member *string
	MaxBytes, MaxRecords, WaitMs uint32
	Flags                        uint8
}

func (FetchBatchesRequest) APIKey() uint16 { return KeyFetchBatches }

func (r FetchBatchesRequest) AppendPayload(dst []byte) []byte {
	dst = appendNStr(appendNStr(dst, r.Topic), r.Cursor)
	dst = appendNStr(appendNStr(dst, r.Group), r.Member)
	dst = appendU32(appendU32(appendU32(dst, r.MaxBytes), r.MaxRecords), r.WaitMs)
	return appendFlags(dst, r.Flags)
}

func (r *FetchBatchesRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = FetchBatchesRequest{
		Topic: d.nstr(), Cursor: d.nstr(), Group: d.nstr(), Member: d.nstr(),
		MaxBytes: d.u32(), MaxRecords: d.u32(), WaitMs: d.u32(),
	}
	r.Flags = d.flags(KeyFetchBatches)
	return d.finish("fetch_batches")
}

// WantsSkips reports whether the request set FlagSkips.
func (r FetchBatchesRequest) WantsSkips() bool { return r.Flags&FlagSkips != 0 }

// FetchBatchesResponse answers fetch_batches (82):
// str(next_cursor) list(range:u64 blob(batch)) [skipped:u64 bound:bool].
// Every record of every batch is for the reader, in order per key;
// batches of different ranges may interleave. Skips, present only when
// the request set FlagSkips, counts the records this page's cursor passed
// because retention had deleted them; each skip is reported once. Batch
// slices alias the payload.
type FetchBatchesResponse struct {
	NextCursor *string
	Batches    []RangeBatch
	Skips      Skips
}

func (r FetchBatchesResponse) AppendPayload(dst []byte) []byte {
	return r.Skips.appendTo(appendRangeBatches(appendNStr(dst, r.NextCursor), r.Batches))
}

// Size is the encoded size of the payload.
func (r FetchBatchesResponse) Size() int {
	n := 1 + 4
	if r.NextCursor != nil {
		n += 4 + len(*r.NextCursor)
	}
	for _, b := range r.Batches {
		n += 8 + 4 + len(b.Batch)
	}
	if r.Skips.Asked {
		n += skipsSize
	}
	return n
}

// Decode reuses the capacity of r.Batches.
func (r *FetchBatchesResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	r.NextCursor = d.nstr()
	r.Batches = d.rangeBatches(r.Batches)
	r.Skips = d.skips()
	return d.finish("fetch_batches response")
}

// SubscribeBatchesRequest (key 83): str(topic) str(group) str(member)
// window:u32 max_bytes:u32 [flags:u8]. Like subscribe (5), it switches
// the connection to stream mode; each push is a FetchBatchesResponse
// payload on the request's correlation id, and stream_ack (6)
// acknowledges and returns credit in records; a push that would pass the
// window ends inside a batch. Flags is sent only when not zero;
// FlagSkips asks each push to end with a skip report.
type SubscribeBatchesRequest struct {
	Topic, Group, Member *string
	Window, MaxBytes     uint32
	Flags                uint8
}

func (SubscribeBatchesRequest) APIKey() uint16 { return KeySubscribeBatches }

func (r SubscribeBatchesRequest) AppendPayload(dst []byte) []byte {
	dst = appendNStr(appendNStr(appendNStr(dst, r.Topic), r.Group), r.Member)
	return appendFlags(appendU32(appendU32(dst, r.Window), r.MaxBytes), r.Flags)
}

func (r *SubscribeBatchesRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = SubscribeBatchesRequest{Topic: d.nstr(), Group: d.nstr(), Member: d.nstr(), Window: d.u32(), MaxBytes: d.u32()}
	r.Flags = d.flags(KeySubscribeBatches)
	return d.finish("subscribe_batches")
}

// WantsSkips reports whether the request set FlagSkips.
func (r SubscribeBatchesRequest) WantsSkips() bool { return r.Flags&FlagSkips != 0 }
