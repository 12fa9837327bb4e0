package main

// `cluster status` and `topic describe` print the repair views a node
// reports, each section only when it has something in it; against a node
// that predates them the CLI asks without the flag and works the
// under-replicated segments out itself. A scripted node gives answers a
// healthy test cluster would not (a full disk, a lost segment).

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/wire"
	"github.com/malachi-log/malachi/pkg/client"
)

// repairNode is a scripted cluster node. With v2 it lists version 2 of
// cluster_status and describe_topic and answers with repair when asked;
// without, it lists version 1 of them only. repair is its repair section.
type repairNode struct {
	v2 bool
	// gone is a node, if not 0, that left: not registered, so not
	// "down", but its copies are not live. disksOK drops node 2's full
	// disk.
	gone    uint64
	disksOK bool
	// omit leaves out the copies of the last segments of its topic.
	omit   int
	repair *wire.ClusterRepair
	mu     sync.Mutex
	flags  []uint8 // the flags of each cluster_status and describe_topic received
}

func (n *repairNode) answer(req wire.Request) (wire.Response, string) {
	switch r := req.(type) {
	case *wire.APIVersionsRequest:
		resp := wire.APIVersionsResponse{MaxFrame: 1 << 20, NodeVersion: "fake"}
		for _, kv := range wire.Versions() {
			if kv.Key == wire.KeySessionAuth {
				continue
			}
			if !n.v2 {
				kv.Max = 1
			}
			// It predates describing a topic by pages (version 3).
			kv.Max = min(kv.Max, 2)
			resp.Keys = append(resp.Keys, kv)
		}
		return resp, ""
	case *wire.ClusterStatusRequest:
		n.note(r.Flags)
		st := &wire.ClusterStatusResponse{Node: 2, Vnodes: 4, Nodes: []wire.ClusterNode{
			{ID: 1, Registered: true, Liveness: "alive", Disk: "ok"},
			{ID: 2, Registered: true, Liveness: "alive", Disk: "full", Attrs: []wire.ClusterAttr{{Key: "malachi.disk", Value: "full"}}},
			{ID: 3, Registered: true, Liveness: "alive", Disk: "ok"},
		}}
		for i := range st.Nodes {
			if st.Nodes[i].ID == n.gone {
				st.Nodes[i].Registered, st.Nodes[i].Liveness = false, "left"
			}
			if n.disksOK {
				st.Nodes[i].Disk, st.Nodes[i].Attrs = "ok", nil
			}
		}
		if r.WantsRepair() {
			st.Repair = n.repair
		}
		return st, ""
	case *wire.ListTopicsRequest:
		return wire.ListTopicsResponse{Topics: []wire.TopicSummary{{Name: "orders"}}}, ""
	case *wire.DescribeTopicRequest:
		n.note(r.Flags)
		d := &wire.DescribeTopicResponse{ID: 1, Name: "orders", Bits: 8, Copies: r.WantsCopies(), Ranges: []wire.RangeInfo{{
			ID: 1, End: 256, Active: true, Segments: []wire.SegmentInfo{
				{ID: 7, Replicas: []string{"node-1", "node-2", "node-3"}},
				{ID: 9, Active: true, Replicas: []string{"node-1", "node-2", "node-3"}},
			},
		}}}
		if d.Copies {
			d.Ranges[0].Segments[0].Copies = copies(wire.CopyUnchecked, wire.CopyDamaged, wire.CopyUnchecked)
			d.Ranges[0].Segments[1].Copies = copies(wire.CopyUnchecked, wire.CopyUnchecked, wire.CopyMissing)
			if n.omit > 0 {
				d.Ranges[0].Segments[1].Copies, d.CopiesOmitted = nil, n.omit
			}
		}
		return d, ""
	}
	return nil, wire.ReasonUnknownAPIKey
}

// copies are node-1, node-2... in the states given.
func copies(states ...wire.CopyState) []wire.SegmentCopy {
	out := make([]wire.SegmentCopy, len(states))
	for i, st := range states {
		out[i] = wire.SegmentCopy{Node: uint64(i + 1), State: st}
	}
	return out
}

func (n *repairNode) note(f uint8) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.flags = append(n.flags, f)
}

func (n *repairNode) flagsSeen() []uint8 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]uint8(nil), n.flags...)
}

var troubledRepair = &wire.ClusterRepair{
	UnderReplicated: []wire.UnderReplicatedTopic{{Topic: "orders", Segments: 120}},
	UnderReplicatedSegments: []wire.UnderReplicatedSegment{
		{Topic: "orders", Range: 1, Segment: 7, Replicas: []string{"node-1", "node-2", "node-3"}, Live: 2, Factor: 3},
	},
	UnderReplicatedTotal: 120,
	Healing:              []wire.HealingCopy{{Segment: 7, Source: 1, Target: 2, Bytes: 3 << 20}},
	HealingTotal:         1,
	// The node cut its list of damaged copies: the total is the count.
	Damaged:       []wire.DamagedCopy{{Segment: 7, Node: 2}, {Segment: 11, Node: 3}},
	DamagedTotal:  5000,
	Problems:      []wire.HealProblem{{Segment: 11, Problem: "no healthy source", Detail: "every copy is damaged"}},
	ProblemsTotal: 1,
	ScrubCopies:   40, ScrubBehind: true,
}

func TestClusterStatusPrintsRepair(t *testing.T) {
	t.Parallel()
	n := &repairNode{v2: true, repair: troubledRepair}
	c := newCLI(t, startFakeNode(t, nil, n.answer).addr())
	text := c.ok("cluster", "status")
	if strings.Contains(text, `\n`) {
		t.Errorf("cluster status prints an escaped newline:\n%s", text)
	}
	for _, want := range []string{
		"Healthy", "no", "Disks not ok", "2 (full)", "Under-replicated  120 segments", "Damaged copies    5,000 copies",
		"Heal problems     1 segment", "never served, replaced from a healthy copy (2 of 5,000 listed)",
		"DISK", "Under-replicated segments: 120", "The first 1 of 120:", "2 of 3",
		"Healing: copies this node fills", "WRITTEN", "3.0 MiB",
		"Damaged copies: never served", "Not healed yet", "no healthy source", "every copy is damaged",
		"Scrub: 40 sealed copies", "BEHIND",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("cluster status lacks %q:\n%s", want, text)
		}
	}
	var doc struct {
		client.ClusterStatus
		UnderReplicated []client.UnderReplicatedTopic `json:"under_replicated"`
	}
	if err := json.Unmarshal([]byte(c.ok("cluster", "status", "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	r := doc.Repair
	if r == nil || len(r.Damaged) != 2 || r.Damaged[1] != (client.DamagedCopy{Segment: 11, Node: 3}) || !r.ScrubBehind ||
		len(r.Healing) != 1 || r.Healing[0].Bytes != 3<<20 || doc.Nodes[1].Disk != "full" ||
		len(doc.UnderReplicated) != 1 || doc.UnderReplicated[0].Segments != 120 || r.DamagedTotal != 5000 {
		t.Fatalf("cluster status -o json: %+v", doc)
	}
	for _, f := range n.flagsSeen() {
		if f != wire.FlagRepair {
			t.Fatalf("cluster_status sent with flags %v, want the repair flag", n.flagsSeen())
		}
	}
}

// A healthy cluster shows no repair tables, only the scrub line.
func TestClusterStatusOmitsEmptyRepairSections(t *testing.T) {
	t.Parallel()
	n := &repairNode{v2: true, repair: &wire.ClusterRepair{ScrubCopies: 1}}
	c := newCLI(t, startFakeNode(t, nil, n.answer).addr())
	text := c.ok("cluster", "status")
	for _, absent := range []string{"Healing:", "Damaged copies:", "Not healed yet", "BEHIND", "TOPIC"} {
		if strings.Contains(text, absent) {
			t.Errorf("cluster status of a cluster with nothing to repair shows %q:\n%s", absent, text)
		}
	}
	for _, want := range []string{"Under-replicated segments: none", "Scrub: 1 sealed copy on this node"} {
		if !strings.Contains(text, want) {
			t.Errorf("cluster status lacks %q:\n%s", want, text)
		}
	}
}

// A node that predates the repair views is asked without the flags; the
// CLI still shows its disks (from the attribute) and scans its topics.
func TestClusterStatusOfAnOlderNode(t *testing.T) {
	t.Parallel()
	n := &repairNode{repair: troubledRepair}
	c := newCLI(t, startFakeNode(t, nil, n.answer).addr())
	text := c.ok("cluster", "status")
	if strings.Contains(text, "Scrub:") || !strings.Contains(text, "Under-replicated segments: none") || !strings.Contains(text, "full") {
		t.Errorf("cluster status of an older node:\n%s", text)
	}
	if d := c.ok("topic", "describe", "orders"); strings.Contains(d, "COPIES") || !strings.Contains(d, "node-1,node-2,node-3") {
		t.Errorf("topic describe of an older node:\n%s", d)
	}
	for _, f := range n.flagsSeen() {
		if f != 0 {
			t.Fatalf("flags %v sent to a node that serves version 1 only", n.flagsSeen())
		}
	}
	if len(n.flagsSeen()) == 0 {
		t.Fatal("no request reached the node")
	}
}

func TestTopicDescribePrintsCopies(t *testing.T) {
	t.Parallel()
	n := &repairNode{v2: true}
	c := newCLI(t, startFakeNode(t, nil, n.answer).addr())
	text := c.ok("topic", "describe", "orders")
	for _, want := range []string{"COPIES", "node-1 unchecked, node-2 damaged, node-3 unchecked", "node-3 missing"} {
		if !strings.Contains(text, want) {
			t.Errorf("topic describe lacks %q:\n%s", want, text)
		}
	}
	var doc struct {
		Ranges []struct {
			Segments []struct {
				Copies []client.SegmentCopy `json:"copies"`
			} `json:"segments"`
		} `json:"ranges"`
	}
	if err := json.Unmarshal([]byte(c.ok("topic", "describe", "orders", "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Ranges[0].Segments[0].Copies; len(got) != 3 || got[1] != (client.SegmentCopy{Node: "node-2", State: "damaged"}) {
		t.Fatalf("copies in JSON: %+v", got)
	}
}

// Against a node that predates the repair views, the health line counts
// the under-replicated segments the CLI found itself: the copies on a
// node that left make the cluster unhealthy, though no node is down and
// every disk is ok.
func TestClusterStatusOfAnOlderNodeCountsTheScanInItsHealth(t *testing.T) {
	t.Parallel()
	n := &repairNode{gone: 3, disksOK: true}
	text := newCLI(t, startFakeNode(t, nil, n.answer).addr()).ok("cluster", "status")
	for _, want := range []string{"Healthy           no", "Nodes down        none", "Disks not ok      none",
		"Under-replicated  2 segments", "Under-replicated segments: 2"} {
		if !strings.Contains(text, want) {
			t.Errorf("cluster status lacks %q:\n%s", want, text)
		}
	}
	healthy := &repairNode{disksOK: true}
	text = newCLI(t, startFakeNode(t, nil, healthy.answer).addr()).ok("cluster", "status")
	if !strings.Contains(text, "Healthy           yes") || !strings.Contains(text, "Under-replicated  none") {
		t.Errorf("cluster status of a healthy older cluster:\n%s", text)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 5000: "5,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
	if got := ofTotal(100, 5000); got != "100 of 5,000" {
		t.Errorf("ofTotal: %q", got)
	}
}

// A topic whose copies did not all fit the answer says how many segments
// lack them and shows those segments' replicas instead.
func TestTopicDescribeSaysWhichCopiesWereLeftOut(t *testing.T) {
	t.Parallel()
	n := &repairNode{v2: true, omit: 1}
	c := newCLI(t, startFakeNode(t, nil, n.answer).addr())
	text := c.ok("topic", "describe", "orders")
	for _, want := range []string{"Copies of the last 1 segment not reported", "node-1 unchecked, node-2 damaged", "node-1,node-2,node-3"} {
		if !strings.Contains(text, want) {
			t.Errorf("topic describe lacks %q:\n%s", want, text)
		}
	}
	var doc struct {
		CopiesOmitted int `json:"copies_omitted"`
	}
	if err := json.Unmarshal([]byte(c.ok("topic", "describe", "orders", "-o", "json")), &doc); err != nil || doc.CopiesOmitted != 1 {
		t.Fatalf("copies_omitted %d, %v", doc.CopiesOmitted, err)
	}
}
