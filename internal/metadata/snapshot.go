package metadata

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// snapshotFormat versions the snapshot encoding, independently of Version.
const snapshotFormat = 1

// ErrBadSnapshot is returned (wrapped) by Restore for bytes that do not
// decode to a consistent state.
var ErrBadSnapshot = errors.New("metadata: bad snapshot")

// image is the snapshot encoding: every table as a slice sorted by its key,
// so equal states encode to equal bytes. Indexes are not stored; Restore
// rebuilds them.
type image struct {
	Format        int           `json:"format"`
	LastTopic     uint64        `json:"last_topic"`
	LastRange     uint64        `json:"last_range"`
	LastSegment   uint64        `json:"last_segment"`
	LastUser      uint64        `json:"last_user,omitempty"`
	Shard         uint16        `json:"shard,omitempty"`
	ClusterID     string        `json:"cluster_id,omitempty"`
	ClusterSecret []byte        `json:"cluster_secret,omitempty"`
	Topics        []Topic       `json:"topics"`
	Ranges        []Range       `json:"ranges"`
	Segments      []Segment     `json:"segments"`
	Groups        []groupRecord `json:"groups"`
	Users         []User        `json:"users"`
	ACLs          []ACL         `json:"acls"`
	// Policies (sorted by name) and DeletedSegments (oldest first, the
	// order eviction follows) are absent from older snapshots, and from
	// states that never had them, whose bytes are thus unchanged.
	Policies        []Policy `json:"policies,omitempty"`
	DeletedSegments []uint64 `json:"deleted_segments,omitempty"`
	// LostSegments (oldest first) are the ids deleted with ReasonLost
	// (WasLost); absent from older snapshots.
	LostSegments []uint64 `json:"lost_segments,omitempty"`
}

type groupRecord struct {
	Topic   uint64       `json:"topic"`
	Group   string       `json:"group"`
	Entries []GroupEntry `json:"entries"`
	// Skipped and SkipBound are the group's skip counter (GroupSkipped).
	Skipped   uint64 `json:"skipped,omitempty"`
	SkipBound bool   `json:"skip_bound,omitempty"`
	// CommitAt is the Now of the group's last commit_offsets or
	// set_offsets.
	CommitAt int64 `json:"commit_at,omitempty"`
}

// Snapshot encodes the state deterministically (JSON with every table
// sorted): equal states give equal bytes, and Snapshot of Restore(b) is b.
func (s *State) Snapshot() ([]byte, error) {
	return json.Marshal(s.export())
}

// Restore decodes a snapshot, rebuilds the indexes and checks every
// invariant, so a damaged snapshot is refused rather than served.
func Restore(b []byte) (*State, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // a newer format must not lose fields silently
	var img image
	if err := dec.Decode(&img); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data", ErrBadSnapshot)
	}
	if img.Format != snapshotFormat {
		return nil, fmt.Errorf("%w: format %d", ErrBadSnapshot, img.Format)
	}
	s, err := load(&img)
	if err == nil {
		err = s.CheckInvariants()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	return s, nil
}

// Clone returns a deep copy.
func (s *State) Clone() *State {
	c, err := load(s.export())
	if err != nil {
		panic("metadata: clone of a consistent state failed: " + err.Error())
	}
	return c
}

// export copies the state into an image (sharing nothing with s).
func (s *State) export() *image {
	img := &image{
		Format: snapshotFormat, LastTopic: s.lastTopic, LastRange: s.lastRange,
		LastSegment: s.lastSegment, LastUser: s.lastUser, Shard: s.shard, ClusterID: s.clusterID, ClusterSecret: slices.Clone(s.clusterSecret),
		Topics: []Topic{}, Ranges: []Range{}, Segments: []Segment{}, Groups: []groupRecord{},
		Users: s.Users(), ACLs: []ACL{},
		DeletedSegments: slices.Clone(s.deleted.order),
		LostSegments:    slices.Clone(s.lost.order),
	}
	if len(s.policies) > 0 {
		img.Policies = s.Policies()
	}
	for _, tr := range s.topics {
		img.Topics = append(img.Topics, tr.t.clone())
		for g, es := range tr.groups {
			sc := tr.skips[g]
			img.Groups = append(img.Groups, groupRecord{Topic: tr.t.ID, Group: g, Entries: slices.Clone(es),
				Skipped: sc.n, SkipBound: sc.bound, CommitAt: sc.at})
		}
	}
	for _, rr := range s.ranges {
		img.Ranges = append(img.Ranges, rr.r.clone())
	}
	for _, seg := range s.segments {
		img.Segments = append(img.Segments, seg.clone())
	}
	for _, list := range s.acls {
		img.ACLs = append(img.ACLs, list...)
	}
	slices.SortFunc(img.Topics, func(a, b Topic) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(img.Ranges, func(a, b Range) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(img.Segments, func(a, b Segment) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(img.Groups, func(a, b groupRecord) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), strings.Compare(a.Group, b.Group))
	})
	slices.SortFunc(img.ACLs, compareACLs)
	return img
}

// load builds a state and its indexes from an image it takes ownership of.
// It checks references; CheckInvariants checks the rest.
func load(img *image) (*State, error) {
	s := New()
	s.lastTopic, s.lastRange, s.lastSegment = img.LastTopic, img.LastRange, img.LastSegment
	s.lastUser = img.LastUser
	s.shard = img.Shard
	s.clusterID, s.clusterSecret = img.ClusterID, img.ClusterSecret
	steps := []func(*image) error{s.loadTopics, s.loadRanges, s.loadSegments, s.loadGroups, s.loadAccess, s.loadPolicies}
	for _, step := range steps {
		if err := step(img); err != nil {
			return nil, err
		}
	}
	s.owners = s.rebuildOwners()
	return s, nil
}

func (s *State) loadTopics(img *image) error {
	for _, t := range img.Topics {
		if t.ID == 0 || t.ID > s.lastTopic || s.topics[t.ID] != nil || s.byName[t.Name] != nil {
			return fmt.Errorf("topic %d %q: bad or duplicate id or name", t.ID, t.Name)
		}
		tr := &topicRec{t: t, groups: make(map[string][]GroupEntry), skips: make(map[string]skipCount)}
		s.topics[t.ID] = tr
		s.byName[t.Name] = tr
	}
	return nil
}

func (s *State) loadRanges(img *image) error {
	for _, r := range img.Ranges {
		if r.ID == 0 || r.ID > s.lastRange || s.ranges[r.ID] != nil || s.topics[r.Topic] == nil {
			return fmt.Errorf("range %d: bad or duplicate id or unknown topic %d", r.ID, r.Topic)
		}
		s.ranges[r.ID] = &rangeRec{r: r}
	}
	for _, tr := range s.topics {
		for _, id := range tr.t.Ranges {
			rr := s.ranges[id]
			if rr == nil || rr.r.Topic != tr.t.ID {
				return fmt.Errorf("topic %d lists range %d it does not own", tr.t.ID, id)
			}
			if rr.r.Active {
				tr.active = append(tr.active, rr)
			}
		}
		slices.SortFunc(tr.active, func(a, b *rangeRec) int { return cmp.Compare(a.r.Start, b.r.Start) })
	}
	return nil
}

// loadSegments relies on img.Segments being sorted by id, which is open
// order and so offset order within a range.
func (s *State) loadSegments(img *image) error {
	for i := range img.Segments {
		seg := &img.Segments[i]
		rr := s.ranges[seg.Range]
		if seg.ID == 0 || seg.ID > s.lastSegment || s.segments[seg.ID] != nil || rr == nil {
			return fmt.Errorf("segment %d: bad or duplicate id or unknown range %d", seg.ID, seg.Range)
		}
		if i > 0 && img.Segments[i-1].ID > seg.ID {
			return fmt.Errorf("segment %d: segments not sorted by id", seg.ID)
		}
		s.segments[seg.ID] = seg
		rr.segs = append(rr.segs, seg)
		if seg.Active {
			if rr.head != nil {
				return fmt.Errorf("range %d: two active segments", rr.r.ID)
			}
			rr.head = seg
		}
	}
	return nil
}

func (s *State) loadGroups(img *image) error {
	for _, g := range img.Groups {
		tr := s.topics[g.Topic]
		if tr == nil || tr.groups[g.Group] != nil {
			return fmt.Errorf("group %q: unknown topic %d or duplicate", g.Group, g.Topic)
		}
		if g.Entries == nil {
			g.Entries = []GroupEntry{} // a group with an empty position still exists
		}
		tr.groups[g.Group] = g.Entries
		if g.Skipped == 0 && g.SkipBound {
			return fmt.Errorf("group %q: skip bound without a count", g.Group)
		}
		if g.Skipped > 0 || g.CommitAt != 0 {
			tr.skips[g.Group] = skipCount{n: g.Skipped, bound: g.SkipBound, at: g.CommitAt}
		}
	}
	return nil
}

func (s *State) loadAccess(img *image) error {
	for i := range img.Users {
		u := &img.Users[i]
		if s.users[u.Name] != nil {
			return fmt.Errorf("user %q: duplicate", u.Name)
		}
		if u.Serial > s.lastUser {
			return fmt.Errorf("user %q: serial %d above the counter %d", u.Name, u.Serial, s.lastUser)
		}
		s.users[u.Name] = u
	}
	for _, a := range img.ACLs {
		if s.users[a.User] == nil {
			return fmt.Errorf("acl of unknown user %q", a.User)
		}
		s.acls[a.User] = append(s.acls[a.User], a)
	}
	return nil
}

// loadPolicies takes the policies and the deleted-id record; their
// validity is CheckInvariants' to judge.
func (s *State) loadPolicies(img *image) error {
	if len(img.Policies) > MaxPolicies || len(img.DeletedSegments) > MaxDeletedIDs || len(img.LostSegments) > MaxLostIDs {
		return fmt.Errorf("%d policies, %d deleted ids, %d lost ids: over the bounds",
			len(img.Policies), len(img.DeletedSegments), len(img.LostSegments))
	}
	for i := range img.Policies {
		p := img.Policies[i].clone()
		if s.policies[p.Name] != nil {
			return fmt.Errorf("policy %q: duplicate", p.Name)
		}
		s.policies[p.Name] = &p
	}
	for _, id := range img.DeletedSegments {
		if s.deleted.set[id] {
			return fmt.Errorf("deleted id %d: duplicate", id)
		}
		s.deleted.add(id)
	}
	for _, id := range img.LostSegments {
		if s.lost.set[id] {
			return fmt.Errorf("lost id %d: duplicate", id)
		}
		s.lost.addBounded(MaxLostIDs, id)
	}
	return nil
}
