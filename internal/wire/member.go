package wire

// Group members that fetch, keys 85–86. A member reads with fetch (3) or
// fetch_batches (82) naming its group and member, which joins it and hands
// it its ranges; the ranges stay its own until it fetches again. While it
// works through what it read it keeps its membership with
// member_heartbeat, which hands out nothing, and it then commits what it
// processed with member_commit, which names the member and the generation
// it learnt, so that a member that has lost its membership meanwhile
// cannot commit records another member now reads. Layouts in docs/wire.md.

// newMemberRequest returns a zero request of key's type, or nil.
func newMemberRequest(key uint16) requestDecoder {
	switch key {
	case KeyMemberHeartbeat:
		return new(MemberHeartbeatRequest)
	case KeyMemberCommit:
		return new(MemberCommitRequest)
	}
	return newClusterRequest(key)
}

// MemberHeartbeatRequest (key 85): str(topic) str(group) str(member).
// MemberStateResponse answers; a member that is not in the group is
// refused stale_member.
type MemberHeartbeatRequest struct{ Topic, Group, Member *string }

func (MemberHeartbeatRequest) APIKey() uint16 { return KeyMemberHeartbeat }

func (r MemberHeartbeatRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendNStr(appendNStr(dst, r.Topic), r.Group), r.Member)
}

func (r *MemberHeartbeatRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = MemberHeartbeatRequest{Topic: d.nstr(), Group: d.nstr(), Member: d.nstr()}
	return d.finish("member_heartbeat")
}

// MemberStateResponse answers member_heartbeat (85): generation:u64
// ranges:u32 members:u32, the group's generation, how many ranges the
// member reads now and how many live members the group has.
type MemberStateResponse struct {
	Generation      uint64
	Ranges, Members uint32
}

func (r MemberStateResponse) AppendPayload(dst []byte) []byte {
	return appendU32(appendU32(appendU64(dst, r.Generation), r.Ranges), r.Members)
}

func (r *MemberStateResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = MemberStateResponse{Generation: d.u64(), Ranges: d.u32(), Members: d.u32()}
	return d.finish("member_heartbeat response")
}

// MemberCommitRequest (key 86): str(topic) str(group) str(member)
// generation:u64 str(cursor). The answer is empty; a stale member is
// refused stale_member.
type MemberCommitRequest struct {
	Topic, Group, Member *string
	Generation           uint64
	Cursor               *string
}

func (MemberCommitRequest) APIKey() uint16 { return KeyMemberCommit }

func (r MemberCommitRequest) AppendPayload(dst []byte) []byte {
	dst = appendNStr(appendNStr(appendNStr(dst, r.Topic), r.Group), r.Member)
	return appendNStr(appendU64(dst, r.Generation), r.Cursor)
}

func (r *MemberCommitRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = MemberCommitRequest{Topic: d.nstr(), Group: d.nstr(), Member: d.nstr(), Generation: d.u64(), Cursor: d.nstr()}
	return d.finish("member_commit")
}
