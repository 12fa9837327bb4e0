package metadata

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

type query func(t *testing.T, st *State, f map[string]string) string

// queries are the read-only script directives, one per accessor.
var queries = map[string]query{
	"topics":   queryTopics,
	"ranges":   queryRanges,
	"active":   queryActive,
	"segments": querySegments,
	"group":    queryGroup,
	"route":    queryRoute,
	"ancestor": queryAncestor,
	"users":    queryUsers,
	"acls":     queryACLs,
	"cluster":  queryCluster,
	"policies": queryPolicies,
	"bound":    queryBound,
	"spans":    querySpans,
	"skipped":  querySkipped,
	"deleted":  queryDeleted,
}

func lines(ls []string) string {
	if len(ls) == 0 {
		return "<none>"
	}
	return strings.Join(ls, "\n")
}

func topicID(t *testing.T, st *State, name string) uint64 {
	tp, ok := st.Topic(name)
	if !ok {
		return 0
	}
	if byID, ok := st.TopicByID(tp.ID); !ok || byID.Name != name {
		t.Fatalf("TopicByID(%d) disagrees with Topic(%q)", tp.ID, name)
	}
	return tp.ID
}

func queryTopics(_ *testing.T, st *State, _ map[string]string) string {
	var out []string
	for _, tp := range st.Topics() {
		line := fmt.Sprintf("topic %d %s bits=%d created=%d ranges=%v", tp.ID, tp.Name, tp.Bits, tp.CreatedAt, tp.Ranges)
		if tp.Replicas != 0 {
			line += fmt.Sprintf(" replicas=%d", tp.Replicas)
		}
		if tp.Policy != "" {
			line += " policy=" + tp.Policy
		}
		out = append(out, line)
	}
	return lines(out)
}

func queryRanges(t *testing.T, st *State, f map[string]string) string {
	var out []string
	for _, r := range st.TopicRanges(topicID(t, st, f["topic"])) {
		out = append(out, formatRange(r))
	}
	return lines(out)
}

func queryActive(t *testing.T, st *State, f map[string]string) string {
	var out []string
	for _, r := range st.ActiveRanges(topicID(t, st, f["topic"])) {
		out = append(out, fmt.Sprintf("%d:[%d,%d)", r.ID, r.Start, r.End))
	}
	return lines([]string{strings.Join(out, " ")})
}

func querySegments(t *testing.T, st *State, f map[string]string) string {
	id := num(t, f["range"])
	var out []string
	for _, s := range st.RangeSegments(id) {
		out = append(out, formatSegment(s))
	}
	if head, ok := st.ActiveSegment(id); ok {
		out = append(out, fmt.Sprintf("head %d", head.ID))
	}
	return lines(out)
}

func queryGroup(t *testing.T, st *State, f map[string]string) string {
	id := topicID(t, st, f["topic"])
	out := []string{fmt.Sprintf("groups %v", st.Groups(id))}
	for _, e := range st.GroupEntries(f["group"], id) {
		out = append(out, fmt.Sprintf("%d/%d/%d/%d", e.Source, e.SliceStart, e.SliceBits, e.Offset))
	}
	return lines(out)
}

func queryRoute(t *testing.T, st *State, f map[string]string) string {
	r, ok := st.ActiveRangeFor(topicID(t, st, f["topic"]), num(t, f["pos"]))
	if !ok {
		return "none"
	}
	return fmt.Sprintf("range %d", r.ID)
}

func queryAncestor(t *testing.T, st *State, f map[string]string) string {
	return fmt.Sprint(st.IsAncestor(num(t, f["anc"]), num(t, f["desc"])))
}

func queryUsers(_ *testing.T, st *State, _ map[string]string) string {
	var out []string
	for _, u := range st.Users() {
		out = append(out, fmt.Sprintf("user %s hash=%s perms=%v", u.Name, u.PasswordHash, u.Perms))
	}
	return lines(out)
}

func queryACLs(_ *testing.T, st *State, f map[string]string) string {
	var out []string
	for _, a := range st.ACLs(f["user"]) {
		out = append(out, fmt.Sprintf("%s %s %s", a.User, a.Operation, a.Pattern))
	}
	return lines(out)
}

func queryCluster(_ *testing.T, st *State, _ map[string]string) string {
	return fmt.Sprintf("id=%q secret=%q", st.ClusterID(), st.ClusterSecret())
}

// TestCommitKeepsNarrowerFurtherEntries: one commit may carry a wide entry
// for a source beside a narrower entry with a higher offset; both stay.
func TestCommitKeepsNarrowerFurtherEntries(t *testing.T) {
	st := New()
	if res := st.Apply(Command{V: 1, Kind: KindCreateTopic, Topic: "t", Bits: 8, Now: 1}); res.Err != nil {
		t.Fatal(res.Err)
	}
	tp, _ := st.Topic("t")
	root := tp.Ranges[0]
	entries := []GroupEntry{
		{Source: root, SliceStart: 64, SliceBits: 5, Offset: 90},
		{Source: root, SliceStart: 64, SliceBits: 6, Offset: 10},
	}
	if res := st.Apply(Command{V: 1, Kind: KindCommitOffsets, Topic: "t", Group: "g", Entries: entries, Now: 2}); res.Err != nil {
		t.Fatal(res.Err)
	}
	got := st.GroupEntries("g", tp.ID)
	if len(got) != 2 || got[0].Offset != 90 || got[1].Offset != 10 {
		t.Fatalf("stored %+v", got)
	}
	// A later commit of the wide entry past both absorbs them.
	wide := []GroupEntry{{Source: root, SliceStart: 64, SliceBits: 6, Offset: 95}}
	st.Apply(Command{V: 1, Kind: KindCommitOffsets, Topic: "t", Group: "g", Entries: wide, Now: 3})
	if got := st.GroupEntries("g", tp.ID); len(got) != 1 || got[0].Offset != 95 {
		t.Fatalf("after a wider commit: %+v", got)
	}
}

func queryPolicies(_ *testing.T, st *State, _ map[string]string) string {
	var out []string
	for _, p := range st.Policies() {
		names := slices.Sorted(maps.Keys(p.Fields))
		var fs []string
		for _, n := range names {
			v := p.Fields[n]
			switch {
			case v.Off:
				fs = append(fs, n+"=off")
			case v.IsStr:
				fs = append(fs, fmt.Sprintf("%s=%q", n, v.Str))
			default:
				fs = append(fs, fmt.Sprintf("%s=%d", n, v.Int))
			}
		}
		out = append(out, fmt.Sprintf("policy %s defined=%d %s", p.Name, p.DefinedAt, strings.Join(fs, " ")))
	}
	return lines(out)
}

func queryBound(_ *testing.T, st *State, f map[string]string) string {
	return fmt.Sprint(st.TopicsBoundTo(f["policy"]))
}

func querySpans(t *testing.T, st *State, f map[string]string) string {
	r, ok := st.Range(num(t, f["range"]))
	if !ok {
		return "no range"
	}
	out := []string{fmt.Sprintf("trimmed=%d", r.Trimmed)}
	for _, sp := range r.Deleted {
		out = append(out, fmt.Sprintf("[%d,%d) records=%d skip=%v bound=%v", sp.Base, sp.End, sp.Records, sp.Skip, sp.Bound))
	}
	if from, ok := f["from"]; ok {
		n, bound := r.DeletedBetween(num(t, from), num(t, f["to"]))
		out = append(out, fmt.Sprintf("between=%d bound=%v", n, bound))
	}
	return lines(out)
}

func querySkipped(_ *testing.T, st *State, f map[string]string) string {
	n, bound, ok := st.GroupSkipped(f["topic"], f["group"])
	return fmt.Sprintf("skipped=%d bound=%v ok=%v", n, bound, ok)
}

func queryDeleted(t *testing.T, st *State, f map[string]string) string {
	var out []string
	for id := range strings.SplitSeq(f["ids"], ",") {
		out = append(out, fmt.Sprintf("%s=%v", id, st.WasDeleted(num(t, id))))
	}
	return strings.Join(out, " ")
}
