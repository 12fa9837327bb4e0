package wire

// Version 3 of describe_topic (65): the description of a topic by pages,
// so that a topic of any size can be described within the frame limit
// and each request costs the node about one page. Layout in docs/wire.md.

// FlagPaged, in describe_topic's flags byte, asks for one page of the
// description; FlagActiveOnly, only with it, leaves sealed ranges out.
const (
	FlagPaged      uint8 = 1 << 1
	FlagActiveOnly uint8 = 1 << 2
)

// MaxPageTokenLen bounds a page token. Tokens are minted by the node and
// opaque to clients.
const MaxPageTokenLen = 64

// DescribeTopicPageResponse answers a describe_topic request that sets
// FlagPaged: id:u64 str(name) bits:u8 created_at:u64 ranges_total:u32
// active_ranges:u32 list(RangeInfo segments_omitted:u32) list(str group)
// groups_omitted:u32 str(next_token) [copies]. Ranges are ascending by
// id, each after the request's token; Groups is listed on the first page
// only (a request without a token), the first by name that fit the
// page's budget, and GroupsOmitted counts the others. Next is nil on the
// last page. The copies section is version 2's, over this page's
// segments.
type DescribeTopicPageResponse struct {
	ID           uint64
	Name         string
	Bits         uint8
	CreatedAt    uint64
	RangesTotal  uint32
	ActiveRanges uint32
	Ranges       []RangeInfo
	Groups       []string
	// GroupsOmitted counts the topic's groups the first page leaves out
	// to stay within its budget (list_groups names them all).
	GroupsOmitted uint32
	Next          *string
	Copies        bool
	// CopiesOmitted counts the last segments of the page whose copies
	// the section leaves out.
	CopiesOmitted int
}

func (r DescribeTopicPageResponse) AppendPayload(dst []byte) []byte {
	dst = appendString(appendU64(dst, r.ID), r.Name)
	dst = appendU64(appendU8(dst, r.Bits), r.CreatedAt)
	dst = appendU32(appendU32(dst, r.RangesTotal), r.ActiveRanges)
	dst = appendU32(dst, uint32(len(r.Ranges)))
	for i := range r.Ranges {
		dst = appendU32(r.Ranges[i].appendTo(dst), r.Ranges[i].SegmentsOmitted)
	}
	dst = appendU32(appendStrings(dst, r.Groups), r.GroupsOmitted)
	dst = appendNStr(dst, r.Next)
	if r.Copies {
		dst = appendCopies(dst, r.Ranges, r.CopiesOmitted)
	}
	return dst
}

func (r *DescribeTopicPageResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = DescribeTopicPageResponse{ID: d.u64(), Name: d.str(), Bits: d.u8(), CreatedAt: d.u64(),
		RangesTotal: d.u32(), ActiveRanges: d.u32()}
	r.Ranges = list(&d, minRangeInfoLen+4, func() (ri RangeInfo) {
		ri.decode(&d)
		ri.SegmentsOmitted = d.u32()
		return ri
	})
	r.Groups = d.strs()
	r.GroupsOmitted = d.u32()
	r.Next = d.nstr()
	if d.err == nil && r.Next != nil && (len(*r.Next) == 0 || len(*r.Next) > MaxPageTokenLen) {
		d.fail("next page token of %d bytes", len(*r.Next))
	}
	if len(d.b) > 0 {
		r.Copies = true
		r.CopiesOmitted = decodeCopies(&d, r.Ranges)
	}
	return d.finish("describe_topic page")
}

// PageHeaderSize is the encoded size of a page without its ranges,
// group names (StringsSize) and copies, with its next token at its longest.
func PageHeaderSize(name string) int {
	return 8 + minPresent + len(name) + 1 + 8 + 2*4 + 4 + 4 + minPresent + MaxPageTokenLen
}

// StringsSize is the encoded size of list(str).
func StringsSize(list []string) int {
	n := 4
	for _, s := range list {
		n += minPresent + len(s)
	}
	return n
}

// RangeInfoSize is the encoded size of ri without its segments, as a
// page lists it (with segments_omitted).
func RangeInfoSize(ri *RangeInfo) int { return minRangeInfoLen + 4 + 8*len(ri.Parents) }

// SegmentInfoSize is the encoded size of s.
func SegmentInfoSize(s *SegmentInfo) int { return minSegmentInfoLen + StringsSize(s.Replicas) - 4 }

// DescribeTopicSize is the encoded size of r without its copies section:
// what a version 1 or 2 answer takes in a frame.
func DescribeTopicSize(r *DescribeTopicResponse) int {
	n := 8 + minPresent + len(r.Name) + 1 + 8 + 4 + StringsSize(r.Groups)
	for i := range r.Ranges {
		n += RangeInfoSize(&r.Ranges[i]) - 4
		for j := range r.Ranges[i].Segments {
			n += SegmentInfoSize(&r.Ranges[i].Segments[j])
		}
	}
	return n
}
