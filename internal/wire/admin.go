package wire

// Admin operations, keys 64–72. These are this broker's own: their layouts
// are in docs/wire.md and, like v1, never change shape once shipped.
// Encodings: integers big-endian, str as in v1, list = count:u32 items,
// bool = u8 0 or 1. Times are unix milliseconds, 0 meaning "not yet" or
// "never".

// newAdminRequest returns a zero admin request of key's type, or nil.
func newAdminRequest(key uint16) requestDecoder {
	switch key {
	case KeyListTopics:
		return new(ListTopicsRequest)
	case KeyDescribeTopic:
		return new(DescribeTopicRequest)
	case KeyDeleteTopic:
		return new(DeleteTopicRequest)
	case KeyCreateTopicEx:
		return new(CreateTopicExRequest)
	case KeySplitRange:
		return new(SplitRangeRequest)
	case KeyMergeRanges:
		return new(MergeRangesRequest)
	case KeyDescribeGroup:
		return new(DescribeGroupRequest)
	case KeyListGroups:
		return new(ListGroupsRequest)
	case KeyStatus:
		return new(StatusRequest)
	case KeyEndCursor:
		return new(EndCursorRequest)
	}
	return newGroupAdminRequest(key)
}

// ListTopicsRequest (key 64) has an empty payload; ListTopicsResponse
// answers it.
type ListTopicsRequest struct{}

func (ListTopicsRequest) APIKey() uint16                  { return KeyListTopics }
func (ListTopicsRequest) AppendPayload(dst []byte) []byte { return dst }
func (*ListTopicsRequest) Decode(payload []byte) error    { return decodeEmpty(payload, "list_topics") }

// DescribeTopicRequest (key 65): str(topic) [flags:u8 [str(page_token)
// max_ranges:u32]]; DescribeTopicResponse answers, or
// DescribeTopicPageResponse when the request sets FlagPaged. Flags
// (version 2 of the key) is sent only when not zero; FlagCopies asks the
// answer to end with each segment's copies. FlagPaged (version 3) asks
// for one page: PageToken (nil for the first page) and MaxRanges (at
// least 1) follow the flags; FlagActiveOnly, only with FlagPaged, leaves
// sealed ranges out of the page.
type DescribeTopicRequest struct {
	Topic     *string
	Flags     uint8
	PageToken *string
	MaxRanges uint32
}

func (DescribeTopicRequest) APIKey() uint16 { return KeyDescribeTopic }

func (r DescribeTopicRequest) AppendPayload(dst []byte) []byte {
	dst = appendFlags(appendNStr(dst, r.Topic), r.Flags)
	if r.Paged() {
		dst = appendU32(appendNStr(dst, r.PageToken), r.MaxRanges)
	}
	return dst
}

func (r *DescribeTopicRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = DescribeTopicRequest{Topic: d.nstr()}
	r.Flags = d.flags(KeyDescribeTopic)
	switch {
	case r.Paged():
		r.PageToken, r.MaxRanges = d.nstr(), d.u32()
		switch {
		case d.err != nil:
		case r.MaxRanges == 0:
			d.fail("page of 0 ranges")
		case r.PageToken != nil && (len(*r.PageToken) == 0 || len(*r.PageToken) > MaxPageTokenLen):
			d.fail("page token of %d bytes, want 1 to %d", len(*r.PageToken), MaxPageTokenLen)
		}
	case r.Flags&FlagActiveOnly != 0:
		d.fail("active ranges only without a page")
	}
	return d.finish("describe_topic")
}

// WantsCopies reports whether the request set FlagCopies.
func (r DescribeTopicRequest) WantsCopies() bool { return r.Flags&FlagCopies != 0 }

// Paged reports whether the request asks for one page (FlagPaged).
func (r DescribeTopicRequest) Paged() bool { return r.Flags&FlagPaged != 0 }

// ActiveOnly reports whether the page leaves sealed ranges out.
func (r DescribeTopicRequest) ActiveOnly() bool { return r.Flags&FlagActiveOnly != 0 }

// DeleteTopicRequest (key 66): str(topic); the answer is empty.
type DeleteTopicRequest struct{ Topic *string }

func (DeleteTopicRequest) APIKey() uint16 { return KeyDeleteTopic }

func (r DeleteTopicRequest) AppendPayload(dst []byte) []byte { return appendNStr(dst, r.Topic) }

func (r *DeleteTopicRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = DeleteTopicRequest{Topic: d.nstr()}
	return d.finish("delete_topic")
}

// CreateTopicExRequest (key 67): str(topic) keyspace_bits:u8 ranges:u32
// [replicas:u8 [str(policy)]]. Unlike v1 create_topic, Bits is honoured
// and the topic starts with Ranges active ranges (a power of two); the
// answer is empty. Replicas, the topic's replication factor, is sent only
// when not zero (zero: the cluster's default) or when a policy follows,
// so a request without either is byte for byte the original layout; a
// present zero with nothing after it is refused as malformed. Policy
// names the storage policy the topic is bound to ("" for none; a present
// empty name is malformed).
type CreateTopicExRequest struct {
	Topic    *string
	Bits     uint8
	Ranges   uint32
	Replicas uint8
	Policy   string
}

func (CreateTopicExRequest) APIKey() uint16 { return KeyCreateTopicEx }

func (r CreateTopicExRequest) AppendPayload(dst []byte) []byte {
	dst = appendU32(appendU8(appendNStr(dst, r.Topic), r.Bits), r.Ranges)
	if r.Replicas != 0 || r.Policy != "" {
		dst = appendU8(dst, r.Replicas)
	}
	if r.Policy != "" {
		dst = appendString(dst, r.Policy)
	}
	return dst
}

func (r *CreateTopicExRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = CreateTopicExRequest{Topic: d.nstr(), Bits: d.u8(), Ranges: d.u32()}
	if d.err == nil && len(d.b) > 0 {
		r.Replicas = d.u8()
		if len(d.b) > 0 {
			if r.Policy = d.name("policy name"); d.err == nil && r.Policy == "" {
				d.fail("policy present and empty")
			}
		} else if r.Replicas == 0 {
			d.fail("replicas present and zero")
		}
	}
	return d.finish("create_topic_ex")
}

// SplitRangeRequest (key 68): str(topic) range:u64. Range 0 selects the
// topic's active range with the most bytes. SplitRangeResponse answers.
type SplitRangeRequest struct {
	Topic *string
	Range uint64
}

func (SplitRangeRequest) APIKey() uint16 { return KeySplitRange }

func (r SplitRangeRequest) AppendPayload(dst []byte) []byte {
	return appendU64(appendNStr(dst, r.Topic), r.Range)
}

func (r *SplitRangeRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = SplitRangeRequest{Topic: d.nstr(), Range: d.u64()}
	return d.finish("split_range")
}

// MergeRangesRequest (key 69): str(topic) a:u64 b:u64, two active buddy
// ranges. MergeRangesResponse answers.
type MergeRangesRequest struct {
	Topic *string
	A, B  uint64
}

func (MergeRangesRequest) APIKey() uint16 { return KeyMergeRanges }

func (r MergeRangesRequest) AppendPayload(dst []byte) []byte {
	return appendU64(appendU64(appendNStr(dst, r.Topic), r.A), r.B)
}

func (r *MergeRangesRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = MergeRangesRequest{Topic: d.nstr(), A: d.u64(), B: d.u64()}
	return d.finish("merge_ranges")
}

// DescribeGroupRequest (key 70): str(topic) str(group) [flags:u8];
// DescribeGroupResponse answers. Flags is sent only when not zero, so a
// request without it is the original layout; FlagSkips asks the answer
// to end with the group's skip count.
type DescribeGroupRequest struct {
	Topic, Group *string
	Flags        uint8
}

func (DescribeGroupRequest) APIKey() uint16 { return KeyDescribeGroup }

func (r DescribeGroupRequest) AppendPayload(dst []byte) []byte {
	return appendFlags(appendNStr(appendNStr(dst, r.Topic), r.Group), r.Flags)
}

func (r *DescribeGroupRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = DescribeGroupRequest{Topic: d.nstr(), Group: d.nstr()}
	r.Flags = d.flags(KeyDescribeGroup)
	return d.finish("describe_group")
}

// WantsSkips reports whether the request set FlagSkips.
func (r DescribeGroupRequest) WantsSkips() bool { return r.Flags&FlagSkips != 0 }

// ListGroupsRequest (key 71): str(topic); ListGroupsResponse answers.
type ListGroupsRequest struct{ Topic *string }

func (ListGroupsRequest) APIKey() uint16 { return KeyListGroups }

func (r ListGroupsRequest) AppendPayload(dst []byte) []byte { return appendNStr(dst, r.Topic) }

func (r *ListGroupsRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ListGroupsRequest{Topic: d.nstr()}
	return d.finish("list_groups")
}

// StatusRequest (key 72) has an empty payload; StatusResponse answers.
type StatusRequest struct{}

func (StatusRequest) APIKey() uint16                  { return KeyStatus }
func (StatusRequest) AppendPayload(dst []byte) []byte { return dst }
func (*StatusRequest) Decode(payload []byte) error    { return decodeEmpty(payload, "status") }

// TopicSummary is one topic in a ListTopicsResponse:
// str(name) bits:u8 active_ranges:u32 ranges:u32 segments:u32 records:u64
// bytes:u64. Ranges and Segments count sealed ones too.
type TopicSummary struct {
	Name                           string
	Bits                           uint8
	ActiveRanges, Ranges, Segments uint32
	Records                        uint64
	Bytes                          uint64
}

const minTopicSummaryLen = minPresent + 1 + 3*4 + 2*8

// ListTopicsResponse answers list_topics (64): list(TopicSummary), sorted
// by name.
type ListTopicsResponse struct{ Topics []TopicSummary }

func (r ListTopicsResponse) AppendPayload(dst []byte) []byte {
	dst = appendU32(dst, uint32(len(r.Topics)))
	for _, t := range r.Topics {
		dst = appendU8(appendString(dst, t.Name), t.Bits)
		dst = appendU32(appendU32(appendU32(dst, t.ActiveRanges), t.Ranges), t.Segments)
		dst = appendU64(appendU64(dst, t.Records), t.Bytes)
	}
	return dst
}

func (r *ListTopicsResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ListTopicsResponse{Topics: list(&d, minTopicSummaryLen, func() TopicSummary {
		return TopicSummary{
			Name: d.str(), Bits: d.u8(),
			ActiveRanges: d.u32(), Ranges: d.u32(), Segments: d.u32(),
			Records: d.u64(), Bytes: d.u64(),
		}
	})}
	return d.finish("list_topics response")
}

// DescribeTopicResponse answers describe_topic (65):
// id:u64 str(name) bits:u8 created_at:u64 list(RangeInfo) list(str group)
// [copies]. Ranges holds every range, sealed ones included, in creation
// order. Copies says the answer ends with the copies section (a request
// with FlagCopies): list(list(SegmentCopy)), one per segment in the order
// the ranges list them, into SegmentInfo.Copies; without it the answer is
// the older layout and no segment's Copies is carried. CopiesOmitted
// counts the last segments whose copies the section leaves out, to keep
// the answer within a frame (the section then has fewer lists than the
// answer has segments).
type DescribeTopicResponse struct {
	ID            uint64
	Name          string
	Bits          uint8
	CreatedAt     uint64
	Ranges        []RangeInfo
	Groups        []string
	Copies        bool
	CopiesOmitted int
}

// RangeInfo is one range of a topic: id:u64 start:u64 end:u64 active:bool
// list(u64 parent) created_at:u64 sealed_at:u64 list(SegmentInfo).
// [Start, End) is its slice of the keyspace. SegmentsOmitted travels
// only in a page (DescribeTopicPageResponse): the oldest segments left
// out of a range too large for a page on its own.
type RangeInfo struct {
	ID, Start, End      uint64
	Active              bool
	Parents             []uint64
	CreatedAt, SealedAt uint64
	Segments            []SegmentInfo
	SegmentsOmitted     uint32
}

const minRangeInfoLen = 3*8 + 1 + 4 + 2*8 + 4

// SegmentInfo is one segment of a range: id:u64 active:bool base:u64
// end:u64 records:u64 bytes:u64 list(str replica) opened_at:u64
// sealed_at:u64 max_expiry:u64. [Base, End) are its offsets; the first
// replica is the primary. Copies travel in the answer's copies section.
type SegmentInfo struct {
	ID                        uint64
	Active                    bool
	Base, End, Records, Bytes uint64
	Replicas                  []string
	OpenedAt, SealedAt        uint64
	MaxExpiry                 uint64
	Copies                    []SegmentCopy
}

const minSegmentInfoLen = 8 + 1 + 4*8 + 4 + 3*8

func (r DescribeTopicResponse) AppendPayload(dst []byte) []byte {
	dst = appendString(appendU64(dst, r.ID), r.Name)
	dst = appendU64(appendU8(dst, r.Bits), r.CreatedAt)
	dst = appendU32(dst, uint32(len(r.Ranges)))
	for i := range r.Ranges {
		dst = r.Ranges[i].appendTo(dst)
	}
	dst = appendStrings(dst, r.Groups)
	if r.Copies {
		dst = appendCopies(dst, r.Ranges, r.CopiesOmitted)
	}
	return dst
}

func (r *DescribeTopicResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = DescribeTopicResponse{ID: d.u64(), Name: d.str(), Bits: d.u8(), CreatedAt: d.u64()}
	r.Ranges = list(&d, minRangeInfoLen, func() (ri RangeInfo) { ri.decode(&d); return ri })
	r.Groups = d.strs()
	if len(d.b) > 0 {
		r.Copies = true
		r.CopiesOmitted = decodeCopies(&d, r.Ranges)
	}
	return d.finish("describe_topic response")
}

func (ri *RangeInfo) appendTo(dst []byte) []byte {
	dst = appendU64(appendU64(appendU64(dst, ri.ID), ri.Start), ri.End)
	dst = appendU64s(appendBool(dst, ri.Active), ri.Parents)
	dst = appendU64(appendU64(dst, ri.CreatedAt), ri.SealedAt)
	dst = appendU32(dst, uint32(len(ri.Segments)))
	for i := range ri.Segments {
		dst = ri.Segments[i].appendTo(dst)
	}
	return dst
}

func (ri *RangeInfo) decode(d *decoder) {
	*ri = RangeInfo{
		ID: d.u64(), Start: d.u64(), End: d.u64(), Active: d.boolean(),
		Parents: d.u64s(), CreatedAt: d.u64(), SealedAt: d.u64(),
	}
	ri.Segments = list(d, minSegmentInfoLen, func() (s SegmentInfo) { s.decode(d); return s })
}

func (s *SegmentInfo) appendTo(dst []byte) []byte {
	dst = appendBool(appendU64(dst, s.ID), s.Active)
	dst = appendU64(appendU64(appendU64(appendU64(dst, s.Base), s.End), s.Records), s.Bytes)
	dst = appendStrings(dst, s.Replicas)
	return appendU64(appendU64(appendU64(dst, s.OpenedAt), s.SealedAt), s.MaxExpiry)
}

func (s *SegmentInfo) decode(d *decoder) {
	*s = SegmentInfo{
		ID: d.u64(), Active: d.boolean(),
		Base: d.u64(), End: d.u64(), Records: d.u64(), Bytes: d.u64(),
		Replicas: d.strs(), OpenedAt: d.u64(), SealedAt: d.u64(), MaxExpiry: d.u64(),
	}
}

// SplitRangeResponse answers split_range (68): list(u64 child), the two
// new ranges, lower half first.
type SplitRangeResponse struct{ Children []uint64 }

func (r SplitRangeResponse) AppendPayload(dst []byte) []byte { return appendU64s(dst, r.Children) }

func (r *SplitRangeResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = SplitRangeResponse{Children: d.u64s()}
	return d.finish("split_range response")
}

// MergeRangesResponse answers merge_ranges (69): child:u64, the new range.
type MergeRangesResponse struct{ Child uint64 }

func (r MergeRangesResponse) AppendPayload(dst []byte) []byte { return appendU64(dst, r.Child) }

func (r *MergeRangesResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = MergeRangesResponse{Child: d.u64()}
	return d.finish("merge_ranges response")
}

// DescribeGroupResponse answers describe_group (70): str(group)
// str(cursor) lag:u64 list(RangeLag) [skipped:u64 bound:bool]. Cursor is
// the committed cursor, nil when the group has committed nothing; Lag is
// in records, summed over Ranges. Skips, present only when the request
// set FlagSkips, counts the records the group's commits passed because
// retention had deleted them.
type DescribeGroupResponse struct {
	Group  string
	Cursor *string
	Lag    uint64
	Ranges []RangeLag
	Skips  Skips
}

// RangeLag is one active range's lag in records: range:u64 lag:u64.
type RangeLag struct{ Range, Lag uint64 }

const minRangeLagLen = 2 * 8

func (r DescribeGroupResponse) AppendPayload(dst []byte) []byte {
	dst = appendU64(appendNStr(appendString(dst, r.Group), r.Cursor), r.Lag)
	dst = appendU32(dst, uint32(len(r.Ranges)))
	for _, rl := range r.Ranges {
		dst = appendU64(appendU64(dst, rl.Range), rl.Lag)
	}
	return r.Skips.appendTo(dst)
}

func (r *DescribeGroupResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = DescribeGroupResponse{Group: d.str(), Cursor: d.nstr(), Lag: d.u64()}
	r.Ranges = list(&d, minRangeLagLen, func() RangeLag { return RangeLag{Range: d.u64(), Lag: d.u64()} })
	r.Skips = d.skips()
	return d.finish("describe_group response")
}

// ListGroupsResponse answers list_groups (71): list(str group), sorted.
type ListGroupsResponse struct{ Groups []string }

func (r ListGroupsResponse) AppendPayload(dst []byte) []byte { return appendStrings(dst, r.Groups) }

func (r *ListGroupsResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ListGroupsResponse{Groups: d.strs()}
	return d.finish("list_groups response")
}

// StatusResponse answers status (72): str(node_id) str(version)
// str(data_dir) uptime_ms:u64 topics:u32 records:u64 bytes:u64.
type StatusResponse struct {
	NodeID, Version, DataDir string
	UptimeMs                 uint64
	Topics                   uint32
	Records, Bytes           uint64
}

func (r StatusResponse) AppendPayload(dst []byte) []byte {
	dst = appendString(appendString(appendString(dst, r.NodeID), r.Version), r.DataDir)
	dst = appendU32(appendU64(dst, r.UptimeMs), r.Topics)
	return appendU64(appendU64(dst, r.Records), r.Bytes)
}

func (r *StatusResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = StatusResponse{
		NodeID: d.str(), Version: d.str(), DataDir: d.str(),
		UptimeMs: d.u64(), Topics: d.u32(), Records: d.u64(), Bytes: d.u64(),
	}
	return d.finish("status response")
}

// EndCursorRequest (key 73): str(topic); CursorResponse answers with a
// cursor positioned after everything the topic holds now, so a reader can
// start at the end without reading the history.
type EndCursorRequest struct{ Topic *string }

func (EndCursorRequest) APIKey() uint16 { return KeyEndCursor }

func (r EndCursorRequest) AppendPayload(dst []byte) []byte { return appendNStr(dst, r.Topic) }

func (r *EndCursorRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = EndCursorRequest{Topic: d.nstr()}
	return d.finish("end_cursor")
}

// CursorResponse answers end_cursor (73), cursor_at_time (74) and
// cursor_from_end (78): str(cursor).
type CursorResponse struct{ Cursor *string }

func (r CursorResponse) AppendPayload(dst []byte) []byte { return appendNStr(dst, r.Cursor) }

func (r *CursorResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = CursorResponse{Cursor: d.nstr()}
	return d.finish("cursor response")
}
