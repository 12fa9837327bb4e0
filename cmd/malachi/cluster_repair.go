package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/malachi-log/malachi/pkg/client"
)

// diskOK is the disk state of a node whose segment disk takes writes.
const diskOK = "ok"

// healthFields sum up the cluster's health for the head of `cluster
// status`: the nodes down, the disks not ok, the segments short of
// copies (the node's count, or the scan of an older node's topics in u)
// and, from a node that reports repair, the damaged copies, the copies
// healing and the segments the heal cannot fix.
func healthFields(st *client.ClusterStatus, u underReplicatedJSON) [][2]string {
	var down, disks []string
	for _, n := range st.Nodes {
		if n.Registered && n.Liveness != "alive" {
			down = append(down, fmt.Sprintf("%d (%s)", n.ID, n.Liveness))
		}
		if d := diskText(n); d != "-" && d != diskOK {
			disks = append(disks, fmt.Sprintf("%d (%s)", n.ID, d))
		}
	}
	under := countOf(u.Total, "segment")
	if u.TopicsTruncated {
		under += fmt.Sprintf(" (in the first %d topics only)", u.TopicsScanned)
	}
	healthy := len(down) == 0 && len(disks) == 0 && u.Total == 0
	out := [][2]string{
		{"Nodes down", listOrNone(down)},
		{"Disks not ok", listOrNone(disks)},
		{"Under-replicated", under},
	}
	if r := st.Repair; r != nil {
		healthy = healthy && r.DamagedTotal == 0 && r.ProblemsTotal == 0
		out = append(out,
			[2]string{"Damaged copies", countOf(r.DamagedTotal, "copy")},
			[2]string{"Heal problems", countOf(r.ProblemsTotal, "segment")},
			[2]string{"Healing here", countOf(r.HealingTotal, "copy")},
		)
	}
	return append([][2]string{{"Healthy", yesNo(healthy)}}, out...)
}

// diskText is a node's disk state: the field a node reports, else the
// attribute an older node sets when the disk is not ok, else "-".
func diskText(n client.ClusterNode) string {
	if n.Disk != "" {
		return n.Disk
	}
	if d := n.Attrs["malachi.disk"]; d != "" {
		return d
	}
	return "-"
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// countOf writes n with its noun, "none" for zero.
func countOf(n int, noun string) string {
	switch {
	case n == 0:
		return "none"
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "y"):
		return thousands(n) + " " + strings.TrimSuffix(noun, "y") + "ies"
	}
	return thousands(n) + " " + noun + "s"
}

// thousands writes n with a comma every three digits: 5,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// ofTotal writes how many of a list are shown: "100 of 5,000", or the
// count alone when it is the whole list.
func ofTotal(listed, total int) string {
	if listed >= total {
		return thousands(listed)
	}
	return thousands(listed) + " of " + thousands(total)
}

// listedNote is the end of a section's head when the node cut its list:
// " (100 of 5,000 listed)".
func listedNote(listed, total int) string {
	if listed >= total {
		return ""
	}
	return " (" + ofTotal(listed, total) + " listed)"
}

func topicsTotal(topics []client.UnderReplicatedTopic) int {
	n := 0
	for _, t := range topics {
		n += t.Segments
	}
	return n
}

// repairUnderReplicated is the node's own count of under-replicated
// segments, in the shape the scan of an older node's topics fills.
func repairUnderReplicated(r *client.ClusterRepair) underReplicatedJSON {
	return underReplicatedJSON{
		UnderReplicated:         nonNil(r.UnderReplicated),
		UnderReplicatedSegments: nonNil(r.UnderReplicatedSegments),
		Total:                   max(r.UnderReplicatedTotal, topicsTotal(r.UnderReplicated)),
	}
}

// printRepair writes the repair sections that have something to show,
// then the scrub line; nothing for a node that reports no repair.
func printRepair(p *printer, r *client.ClusterRepair) error {
	if r == nil {
		return nil
	}
	if len(r.Healing) > 0 {
		p.textf("\nHealing: copies this node fills from a healthy copy%s", listedNote(len(r.Healing), r.HealingTotal))
		rows := make([][]string, 0, len(r.Healing))
		for _, h := range r.Healing {
			rows = append(rows, []string{itoa(h.Segment), itoa(h.Source), itoa(h.Target), humanBytes(h.Bytes)})
		}
		if err := p.table([]string{"SEGMENT", "FROM", "TO", "WRITTEN"}, rows); err != nil {
			return err
		}
	}
	if len(r.Damaged) > 0 {
		p.textf("\nDamaged copies: never served, replaced from a healthy copy%s", listedNote(len(r.Damaged), r.DamagedTotal))
		rows := make([][]string, 0, len(r.Damaged))
		for _, d := range r.Damaged {
			rows = append(rows, []string{itoa(d.Segment), itoa(d.Node)})
		}
		if err := p.table([]string{"SEGMENT", "NODE"}, rows); err != nil {
			return err
		}
	}
	if len(r.Problems) > 0 {
		p.textf("\nNot healed yet%s", listedNote(len(r.Problems), r.ProblemsTotal))
		rows := make([][]string, 0, len(r.Problems))
		for _, pr := range r.Problems {
			rows = append(rows, []string{itoa(pr.Segment), pr.Problem, dash(pr.Detail)})
		}
		if err := p.table([]string{"SEGMENT", "PROBLEM", "DETAIL"}, rows); err != nil {
			return err
		}
	}
	scrub := fmt.Sprintf("Scrub: %s on this node, each re-verified every --scrub-interval", countOf(r.ScrubCopies, "sealed copy"))
	if r.ScrubBehind {
		scrub += "; BEHIND: --scrub-rate is too low to verify them all in one interval"
	}
	p.textf("\n%s", scrub)
	return nil
}
