package metadata

import (
	"cmp"
	"slices"
)

// Topic is a named log whose keyspace is [0, 2^Bits).
type Topic struct {
	ID        uint64   `json:"id"`
	Name      string   `json:"name"`
	Bits      uint8    `json:"bits"`
	CreatedAt int64    `json:"created_at"`
	Ranges    []uint64 `json:"ranges"` // every range ever created, in creation order
	// Owner is the user that created the topic ("" for the node's own
	// topics and for topics created before owners were recorded); the
	// per-user quotas count a user's topics and their ranges by it.
	Owner string `json:"owner,omitempty"`
	// Replicas is the replication factor of the topic's new segments, 0
	// for the cluster's default. The node opening a segment clamps it to
	// the live nodes.
	Replicas int `json:"replicas,omitempty"`
	// Policy is the storage policy the topic is bound to ("" for the
	// node's defaults). The name may be undefined: policies live in the
	// root group, and a topic bound to an unknown name expires nothing.
	Policy string `json:"policy,omitempty"`
}

// Range is a buddy block [Start, End) of a topic's keyspace. An active range
// takes writes; a sealed one was split or merged away and is kept for its
// data and lineage.
type Range struct {
	ID     uint64 `json:"id"`
	Topic  uint64 `json:"topic"`
	Start  uint64 `json:"start"`
	End    uint64 `json:"end"`
	Active bool   `json:"active"`
	// Parents are the immediate parents: one after a split, two (lower,
	// upper) after a merge, none for an initial range.
	Parents []uint64 `json:"parents,omitempty"`
	// Lineage is every ancestor, each before its own descendants (a linear
	// extension of the ancestor relation), so readers can drain it in order.
	Lineage []uint64 `json:"lineage,omitempty"`
	// NextOffset is the lowest base a new segment may open at: the largest
	// End ever sealed in this range. Deleting segments never lowers it, so
	// offsets only grow.
	NextOffset uint64 `json:"next_offset,omitempty"`
	// HeldUntil (unix ms) refuses open_segment in the range before that
	// time (hold_range): a node about to split or merge the range holds it
	// so that no node opens a successor between the seal of its active
	// segment and the split or merge, which the metadata refuses while the
	// range has an active segment.
	HeldUntil int64 `json:"held_until,omitempty"`
	CreatedAt int64 `json:"created_at"`
	SealedAt  int64 `json:"sealed_at,omitempty"`
	// Deleted is what was deleted from the range, in offset order, so
	// readers can be told what they missed (see DeletedSpan).
	Deleted []DeletedSpan `json:"deleted,omitempty"`
	// Trimmed is the end of the deleted prefix: every offset below it
	// is gone.
	Trimmed uint64 `json:"trimmed,omitempty"`
}

// Size is End - Start.
func (r Range) Size() uint64 { return r.End - r.Start }

// Contains reports whether pos lies in [Start, End).
func (r Range) Contains(pos uint64) bool { return pos >= r.Start && pos < r.End }

// Segment is a run of a range's offsets [Base, End) on one replica set. An
// active segment has End == Base in metadata: its real end lives on the
// primary until the seal records it.
type Segment struct {
	ID       uint64   `json:"id"`
	Range    uint64   `json:"range"`
	Replicas []string `json:"replicas,omitempty"` // the first is the primary
	// Damaged are the replicas whose copy was found damaged or missing
	// (mark_copy_damaged), sorted; always a subset of Replicas, since a
	// node leaving the list leaves it too.
	Damaged []string `json:"damaged,omitempty"`
	// Factor is the number of replicas the segment was opened with (0 for
	// segments opened before it was recorded): healing keeps a sealed
	// segment at it whatever the topic's policy says since, so lowering a
	// policy's replicas never strands old data on fewer copies, and
	// raising it does not copy old data again.
	Factor      int    `json:"factor,omitempty"`
	Active      bool   `json:"active"`
	Base        uint64 `json:"base"`
	End         uint64 `json:"end"`
	Records     uint64 `json:"records,omitempty"`
	Bytes       int64  `json:"bytes,omitempty"`
	MaxExpiry   int64  `json:"max_expiry,omitempty"`
	ContentHash uint64 `json:"content_hash,omitempty"`
	Generation  uint32 `json:"generation,omitempty"`
	OpenedAt    int64  `json:"opened_at"`
	SealedAt    int64  `json:"sealed_at,omitempty"`
}

// GroupEntry is one part of a group's committed position, with the shape of
// cursor.Entry: records of range Source whose key position lies in
// [SliceStart, SliceStart+2^SliceBits) and whose offset is < Offset have been
// consumed.
type GroupEntry struct {
	Source     uint64 `json:"source"`
	SliceStart uint64 `json:"slice_start"`
	SliceBits  uint8  `json:"slice_bits"`
	Offset     uint64 `json:"offset"`
}

// sliceEnd is the end of the entry's slice (never overflows: bits <= 32).
func (e GroupEntry) sliceEnd() uint64 { return e.SliceStart + 1<<e.SliceBits }

func compareEntries(a, b GroupEntry) int {
	switch {
	case a.Source != b.Source:
		return cmp.Compare(a.Source, b.Source)
	case a.SliceStart != b.SliceStart:
		return cmp.Compare(a.SliceStart, b.SliceStart)
	default:
		return int(a.SliceBits) - int(b.SliceBits)
	}
}

// User is an account. PasswordHash is opaque here (auth owns its format).
type User struct {
	Name         string   `json:"name"`
	PasswordHash string   `json:"password_hash"`
	Perms        []string `json:"perms"` // sorted, no duplicates
	// Serial is what create_user numbered this user (from 1; 0 for users
	// created before serials existed): a user deleted and created again
	// under the same name has a new one, so a node that saw only the end
	// of both still tells the two apart and revokes the first's logins.
	Serial uint64 `json:"serial,omitempty"`
}

// ACL allows User to perform Operation (produce|consume) on topics matching
// Pattern: a literal topic name, "prefix*" (any name starting with prefix),
// or "*" (every topic).
type ACL struct {
	User      string `json:"user"`
	Operation string `json:"operation"`
	Pattern   string `json:"pattern"`
}

func compareACLs(a, b ACL) int {
	switch {
	case a.User != b.User:
		return cmp.Compare(a.User, b.User)
	case a.Operation != b.Operation:
		return cmp.Compare(a.Operation, b.Operation)
	default:
		return cmp.Compare(a.Pattern, b.Pattern)
	}
}

// The clone helpers keep accessors from handing out the state's own slices.

func (t Topic) clone() Topic {
	t.Ranges = slices.Clone(t.Ranges)
	return t
}

func (r Range) clone() Range {
	r.Parents = slices.Clone(r.Parents)
	r.Lineage = slices.Clone(r.Lineage)
	r.Deleted = slices.Clone(r.Deleted)
	return r
}

func (s Segment) clone() Segment {
	s.Replicas = slices.Clone(s.Replicas)
	s.Damaged = slices.Clone(s.Damaged)
	return s
}

func (u User) clone() User {
	u.Perms = slices.Clone(u.Perms)
	return u
}
