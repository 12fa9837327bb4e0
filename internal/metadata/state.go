package metadata

// State is the whole metadata of a cluster (or of one vnode): topics, their
// ranges and segments, group offsets, users, ACLs and the cluster secret.
// The zero value is not usable; call New or Restore.
//
// State is not safe for concurrent use: its owner serialises Apply and
// guards readers (metastore does both).
type State struct {
	lastTopic, lastRange, lastSegment uint64 // id counters; ids are never reused
	shard                             uint16 // the id block of NewShard; 0 for New
	lastUser                          uint64 // create_user's serial counter (User.Serial)

	topics   map[uint64]*topicRec
	byName   map[string]*topicRec
	ranges   map[uint64]*rangeRec
	segments map[uint64]*Segment
	users    map[string]*User
	acls     map[string][]ACL // by user, sorted
	owners   map[string]usage // by Topic.Owner: what the owner's topics hold (no "" key)
	policies map[string]*Policy
	deleted  deletedIDs // the last MaxDeletedIDs deleted segment ids
	lost     deletedIDs // the last MaxLostIDs segment ids deleted as lost

	clusterID     string
	clusterSecret []byte
}

// topicRec is a topic plus its indexes.
type topicRec struct {
	t      Topic
	active []*rangeRec             // active ranges sorted by Start; they tile the keyspace
	groups map[string][]GroupEntry // committed positions by group, each sorted
	skips  map[string]skipCount    // by group: records its commits passed after deletion (no zero entries)
}

// rangeRec is a range plus its segments.
type rangeRec struct {
	r    Range
	segs []*Segment // in open order, which is also offset order
	head *Segment   // the active segment, if any (always the last of segs)
}

// New returns an empty state.
func New() *State {
	return &State{
		topics:   make(map[uint64]*topicRec),
		byName:   make(map[string]*topicRec),
		ranges:   make(map[uint64]*rangeRec),
		segments: make(map[uint64]*Segment),
		users:    make(map[string]*User),
		acls:     make(map[string][]ACL),
		owners:   make(map[string]usage),
		policies: make(map[string]*Policy),
		deleted:  deletedIDs{set: make(map[uint64]bool)},
		lost:     deletedIDs{set: make(map[uint64]bool)},
	}
}

// Apply executes one command. It is deterministic: equal states given equal
// commands produce equal results and equal states. It never panics on bad
// input: an unknown V or Kind answers ErrUnknownCommand and malformed fields
// answer ErrInvalidCommand. When Result.Err is not nil nothing changed.
func (s *State) Apply(cmd Command) Result {
	if cmd.V != Version {
		return failed(ErrUnknownCommand)
	}
	if !cmd.Quota.valid() {
		return failed(ErrInvalidCommand)
	}
	c := &cmd
	switch cmd.Kind {
	case KindCreateTopic:
		return s.createTopic(c)
	case KindDeleteTopic:
		return s.deleteTopic(c)
	case KindOpenSegment:
		return s.openSegment(c)
	case KindSealSegment:
		return s.sealSegment(c)
	case KindDeleteSegment:
		return s.deleteSegment(c)
	case KindSetSegmentReplicas:
		return s.setSegmentReplicas(c)
	case KindMarkCopyDamaged:
		return s.markCopyDamaged(c)
	case KindSplitRange:
		return s.splitRange(c)
	case KindMergeRanges:
		return s.mergeRanges(c)
	case KindHoldRange:
		return s.holdRange(c)
	case KindCommitOffsets:
		return s.commitOffsets(c)
	case KindSetOffsets:
		return s.setOffsets(c)
	case KindDeleteGroup:
		return s.deleteGroup(c)
	case KindBindTopicPolicy:
		return s.bindTopicPolicy(c)
	case KindRecordSealContent:
		return s.recordSealContent(c)
	}
	return s.applyAccess(c)
}

// applyAccess dispatches the user, ACL and cluster commands.
func (s *State) applyAccess(c *Command) Result {
	switch c.Kind {
	case KindCreateUser:
		return s.createUser(c)
	case KindDeleteUser:
		return s.deleteUser(c)
	case KindSetPassword:
		return s.setPassword(c)
	case KindGrantACL:
		return s.grantACL(c)
	case KindRevokeACL:
		return s.revokeACL(c)
	case KindInitCluster:
		return s.initCluster(c)
	case KindDefinePolicy:
		return s.definePolicy(c)
	case KindDeletePolicy:
		return s.deletePolicy(c)
	}
	return failed(ErrUnknownCommand)
}

func (s *State) newTopicID() uint64   { s.lastTopic++; return s.lastTopic }
func (s *State) newRangeID() uint64   { s.lastRange++; return s.lastRange }
func (s *State) newSegmentID() uint64 { s.lastSegment++; return s.lastSegment }

// addRange registers a new range with its topic (not in the active index).
func (s *State) addRange(tr *topicRec, r Range) *rangeRec {
	rr := &rangeRec{r: r}
	s.ranges[r.ID] = rr
	tr.t.Ranges = append(tr.t.Ranges, r.ID)
	s.charge(tr.t.Owner, usage{ranges: 1})
	return rr
}
