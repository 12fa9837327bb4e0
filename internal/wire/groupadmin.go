package wire

// Positions and group administration, keys 74–78: a cursor for a time or
// for the last records of each range, resetting and deleting a group's
// committed position, and a group's live members. Layouts in docs/wire.md.

// newGroupAdminRequest returns a zero request of key's type, or nil.
func newGroupAdminRequest(key uint16) requestDecoder {
	switch key {
	case KeyCursorAtTime:
		return new(CursorAtTimeRequest)
	case KeyGroupSeek:
		return new(GroupSeekRequest)
	case KeyGroupDelete:
		return new(GroupDeleteRequest)
	case KeyDescribeGroupMembers:
		return new(DescribeGroupMembersRequest)
	case KeyCursorFromEnd:
		return new(CursorFromEndRequest)
	}
	return newV2Request(key)
}

// CursorAtTimeRequest (key 74): str(topic) time_ms:u64. CursorResponse
// answers with a cursor at the first record of each range whose timestamp
// is at least TimeMs (unix ms).
type CursorAtTimeRequest struct {
	Topic  *string
	TimeMs uint64
}

func (CursorAtTimeRequest) APIKey() uint16 { return KeyCursorAtTime }

func (r CursorAtTimeRequest) AppendPayload(dst []byte) []byte {
	return appendU64(appendNStr(dst, r.Topic), r.TimeMs)
}

func (r *CursorAtTimeRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = CursorAtTimeRequest{Topic: d.nstr(), TimeMs: d.u64()}
	return d.finish("cursor_at_time")
}

// CursorFromEndRequest (key 78): str(topic) n:u64. CursorResponse answers
// with a cursor N records before the end of each active range's history.
type CursorFromEndRequest struct {
	Topic *string
	N     uint64
}

func (CursorFromEndRequest) APIKey() uint16 { return KeyCursorFromEnd }

func (r CursorFromEndRequest) AppendPayload(dst []byte) []byte {
	return appendU64(appendNStr(dst, r.Topic), r.N)
}

func (r *CursorFromEndRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = CursorFromEndRequest{Topic: d.nstr(), N: d.u64()}
	return d.finish("cursor_from_end")
}

// GroupSeekRequest (key 75): str(topic) str(group) str(cursor). Replaces
// the group's committed position with the cursor; the answer is empty.
type GroupSeekRequest struct{ Topic, Group, Cursor *string }

func (GroupSeekRequest) APIKey() uint16 { return KeyGroupSeek }

func (r GroupSeekRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendNStr(appendNStr(dst, r.Topic), r.Group), r.Cursor)
}

func (r *GroupSeekRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = GroupSeekRequest{Topic: d.nstr(), Group: d.nstr(), Cursor: d.nstr()}
	return d.finish("group_seek")
}

// GroupDeleteRequest (key 76): str(topic) str(group). Removes the group's
// committed position; the answer is empty.
type GroupDeleteRequest struct{ Topic, Group *string }

func (GroupDeleteRequest) APIKey() uint16 { return KeyGroupDelete }

func (r GroupDeleteRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendNStr(dst, r.Topic), r.Group)
}

func (r *GroupDeleteRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = GroupDeleteRequest{Topic: d.nstr(), Group: d.nstr()}
	return d.finish("group_delete")
}

// DescribeGroupMembersRequest (key 77): str(topic) str(group);
// DescribeGroupMembersResponse answers.
type DescribeGroupMembersRequest struct{ Topic, Group *string }

func (DescribeGroupMembersRequest) APIKey() uint16 { return KeyDescribeGroupMembers }

func (r DescribeGroupMembersRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendNStr(dst, r.Topic), r.Group)
}

func (r *DescribeGroupMembersRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = DescribeGroupMembersRequest{Topic: d.nstr(), Group: d.nstr()}
	return d.finish("describe_group_members")
}

// DescribeGroupMembersResponse answers describe_group_members (77):
// generation:u64 list(GroupMember). Generation is 0 and the list empty
// when the group has no live members.
type DescribeGroupMembersResponse struct {
	Generation uint64
	Members    []GroupMember
}

// GroupMember is one live member: str(member) last_seen_ms:u64
// list(u64 range), its assigned active ranges, ascending.
type GroupMember struct {
	Member     string
	LastSeenMs uint64
	Ranges     []uint64
}

const minGroupMemberLen = minPresent + 8 + 4

func (r DescribeGroupMembersResponse) AppendPayload(dst []byte) []byte {
	dst = appendU32(appendU64(dst, r.Generation), uint32(len(r.Members)))
	for _, m := range r.Members {
		dst = appendU64s(appendU64(appendString(dst, m.Member), m.LastSeenMs), m.Ranges)
	}
	return dst
}

func (r *DescribeGroupMembersResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = DescribeGroupMembersResponse{Generation: d.u64()}
	r.Members = list(&d, minGroupMemberLen, func() GroupMember {
		return GroupMember{Member: d.str(), LastSeenMs: d.u64(), Ranges: d.u64s()}
	})
	return d.finish("describe_group_members response")
}
