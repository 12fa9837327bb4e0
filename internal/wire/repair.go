package wire

// The repair views: the trailing section of cluster_status (87) that
// reports under-replicated, healing and damaged segments, and the one of
// describe_topic (65) that reports each segment's copies. Both are
// version 2 of their key: sent only to a request that sets the flag, so
// a client that does not ask reads the older layout byte for byte.
// Layouts in docs/wire.md.

// FlagRepair, in the optional flags byte of cluster_status (87), asks
// for the repair section. FlagCopies, in that of describe_topic (65),
// asks for each segment's copies with their state.
const (
	FlagRepair uint8 = 1 << 0
	FlagCopies uint8 = 1 << 0
)

// ClusterRepair is repair as the answering node sees it:
// list(UnderReplicatedTopic) list(UnderReplicatedSegment)
// under_replicated_total:u32 list(HealingCopy) healing_total:u32
// list(DamagedCopy) damaged_total:u32 list(HealProblem) problems_total:u32
// scrub_copies:u32 scrub_behind:bool list(str disk). The node lists at
// most 100 of each list (topics by name, the others by segment); each
// total counts them all, so a list cut short still tells the real count.
// A total below its list's length is malformed. The disks are one per
// node of the answer, in its order (ClusterNode.Disk).
type ClusterRepair struct {
	UnderReplicated         []UnderReplicatedTopic
	UnderReplicatedSegments []UnderReplicatedSegment
	// UnderReplicatedTotal counts the under-replicated segments, of
	// every topic, listed or not.
	UnderReplicatedTotal uint32
	Healing              []HealingCopy
	HealingTotal         uint32
	Damaged              []DamagedCopy
	DamagedTotal         uint32
	Problems             []HealProblem
	ProblemsTotal        uint32
	ScrubCopies          uint32
	ScrubBehind          bool
}

// UnderReplicatedTopic is str(topic) segments:u32: the topic's segments
// with fewer live replicas than their factor.
type UnderReplicatedTopic struct {
	Topic    string
	Segments uint32
}

// UnderReplicatedSegment is str(topic) range:u64 segment:u64 active:bool
// list(str replica) live:u32 factor:u32: Live of its Replicas are live in
// the answering node's view, fewer than Factor.
type UnderReplicatedSegment struct {
	Topic          string
	Range, Segment uint64
	Active         bool
	Replicas       []string
	Live, Factor   uint32
}

// HealingCopy is segment:u64 source:u64 target:u64 bytes:u64: Target
// fills a new copy of Segment from Source and holds Bytes of it so far.
type HealingCopy struct {
	Segment, Source, Target, Bytes uint64
}

// DamagedCopy is segment:u64 node:u64: Node's copy of Segment was found
// damaged or missing and is never served.
type DamagedCopy struct {
	Segment, Node uint64
}

// HealProblem is segment:u64 str(problem) str(detail): a segment the
// answering node's last heal plan could not heal, and why.
type HealProblem struct {
	Segment         uint64
	Problem, Detail string
}

const (
	minURTopicLen   = minPresent + 4
	minURSegmentLen = minPresent + 2*8 + 1 + 4 + 2*4
	minHealingLen   = 4 * 8
	minDamagedLen   = 2 * 8
	minProblemLen   = 8 + 2*minPresent
)

func (r *ClusterRepair) appendTo(dst []byte, nodes []ClusterNode) []byte {
	dst = appendU32(dst, uint32(len(r.UnderReplicated)))
	for _, t := range r.UnderReplicated {
		dst = appendU32(appendString(dst, t.Topic), t.Segments)
	}
	dst = appendU32(dst, uint32(len(r.UnderReplicatedSegments)))
	for _, s := range r.UnderReplicatedSegments {
		dst = appendBool(appendU64(appendU64(appendString(dst, s.Topic), s.Range), s.Segment), s.Active)
		dst = appendU32(appendU32(appendStrings(dst, s.Replicas), s.Live), s.Factor)
	}
	dst = appendU32(dst, r.UnderReplicatedTotal)
	dst = appendU32(dst, uint32(len(r.Healing)))
	for _, h := range r.Healing {
		dst = appendU64(appendU64(appendU64(appendU64(dst, h.Segment), h.Source), h.Target), h.Bytes)
	}
	dst = appendU32(appendU32(dst, r.HealingTotal), uint32(len(r.Damaged)))
	for _, c := range r.Damaged {
		dst = appendU64(appendU64(dst, c.Segment), c.Node)
	}
	dst = appendU32(appendU32(dst, r.DamagedTotal), uint32(len(r.Problems)))
	for _, p := range r.Problems {
		dst = appendString(appendString(appendU64(dst, p.Segment), p.Problem), p.Detail)
	}
	dst = appendU32(dst, r.ProblemsTotal)
	dst = appendBool(appendU32(dst, r.ScrubCopies), r.ScrubBehind)
	dst = appendU32(dst, uint32(len(nodes)))
	for _, n := range nodes {
		dst = appendString(dst, n.Disk)
	}
	return dst
}

// decode reads the section and sets each node's Disk; a disk count other
// than the node count is malformed.
func (r *ClusterRepair) decode(d *decoder, nodes []ClusterNode) {
	r.UnderReplicated = list(d, minURTopicLen, func() UnderReplicatedTopic {
		return UnderReplicatedTopic{Topic: d.str(), Segments: d.u32()}
	})
	r.UnderReplicatedSegments = list(d, minURSegmentLen, func() UnderReplicatedSegment {
		s := UnderReplicatedSegment{Topic: d.str(), Range: d.u64(), Segment: d.u64(), Active: d.boolean()}
		s.Replicas, s.Live, s.Factor = d.strs(), d.u32(), d.u32()
		return s
	})
	r.UnderReplicatedTotal = d.total("under-replicated segments", len(r.UnderReplicatedSegments))
	r.Healing = list(d, minHealingLen, func() HealingCopy {
		return HealingCopy{Segment: d.u64(), Source: d.u64(), Target: d.u64(), Bytes: d.u64()}
	})
	r.HealingTotal = d.total("healing copies", len(r.Healing))
	r.Damaged = list(d, minDamagedLen, func() DamagedCopy { return DamagedCopy{Segment: d.u64(), Node: d.u64()} })
	r.DamagedTotal = d.total("damaged copies", len(r.Damaged))
	r.Problems = list(d, minProblemLen, func() HealProblem {
		return HealProblem{Segment: d.u64(), Problem: d.str(), Detail: d.str()}
	})
	r.ProblemsTotal = d.total("heal problems", len(r.Problems))
	r.ScrubCopies, r.ScrubBehind = d.u32(), d.boolean()
	disks := d.strs()
	if d.err == nil && len(disks) != len(nodes) {
		d.fail("%d disks for %d nodes", len(disks), len(nodes))
		return
	}
	for i, disk := range disks {
		nodes[i].Disk = disk
	}
}

// total reads a list's total:u32, which counts at least the listed.
func (d *decoder) total(what string, listed int) uint32 {
	n := d.u32()
	if d.err == nil && int64(n) < int64(listed) {
		d.fail("%s total %d below the %d listed", what, n, listed)
	}
	return n
}

// CopyState is the state of a segment's copy, a u8 on the wire.
type CopyState uint8

// The states of a copy. A node knows only its own copies' scrub
// verdicts, so only the answering node's copies can be verified.
const (
	// CopyUnchecked: on a live node and not found damaged; whether a
	// check against the seal passed is not recorded (the segment may be
	// active, with no seal yet).
	CopyUnchecked CopyState = iota
	// CopyDamaged: found damaged or missing on its node, never served.
	CopyDamaged
	// CopyHealing: the answering node is filling the copy.
	CopyHealing
	// CopyMissing: its node is not live in the answering node's view.
	CopyMissing
	// CopyVerified: the answering node's own copy, found whole against
	// the seal by its last scrub.
	CopyVerified
	copyStates
)

var copyStateNames = [copyStates]string{"unchecked", "damaged", "healing", "missing", "verified"}

// String is the state's name: unchecked, damaged, healing, missing or
// verified.
func (s CopyState) String() string {
	if s < copyStates {
		return copyStateNames[s]
	}
	return "unknown"
}

// SegmentCopy is one copy of a segment in describe_topic's copies
// section: node:u64 state:u8 (CopyState; any other value is malformed).
type SegmentCopy struct {
	Node  uint64
	State CopyState
}

const minSegmentCopyLen = 8 + 1

// appendCopies writes the copies section: one list(SegmentCopy) per
// segment, in the order the ranges list them, but for the last omitted
// segments (left out to keep the answer within a frame).
func appendCopies(dst []byte, ranges []RangeInfo, omitted int) []byte {
	n := 0
	for i := range ranges {
		n += len(ranges[i].Segments)
	}
	n = max(n-omitted, 0)
	dst = appendU32(dst, uint32(n))
	for i := range ranges {
		for _, s := range ranges[i].Segments {
			if n == 0 {
				return dst
			}
			n--
			dst = appendU32(dst, uint32(len(s.Copies)))
			for _, c := range s.Copies {
				dst = appendU8(appendU64(dst, c.Node), uint8(c.State))
			}
		}
	}
	return dst
}

// decodeCopies reads the copies section into ranges' segments and
// answers how many segments, the last ones, it has no copies for. More
// lists than segments is malformed.
func decodeCopies(d *decoder, ranges []RangeInfo) (omitted int) {
	copies := list(d, 4, func() []SegmentCopy {
		return list(d, minSegmentCopyLen, func() SegmentCopy {
			c := SegmentCopy{Node: d.u64(), State: CopyState(d.u8())}
			if d.err == nil && c.State >= copyStates {
				d.fail("copy state %d", c.State)
			}
			return c
		})
	})
	if d.err != nil {
		return 0
	}
	k := 0
	for i := range ranges {
		for j := range ranges[i].Segments {
			if k < len(copies) {
				ranges[i].Segments[j].Copies = copies[k]
			} else {
				omitted++
			}
			k++
		}
	}
	if len(copies) > k {
		d.fail("copies for %d segments, the answer has %d", len(copies), k)
	}
	return omitted
}

// CopiesSize is the encoded size of one segment's entry in the copies
// section.
func CopiesSize(copies []SegmentCopy) int { return 4 + len(copies)*minSegmentCopyLen }
