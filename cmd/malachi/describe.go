package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// The JSON shape of `topic describe -o json`. Times are RFC 3339 (UTC) and
// omitted when unset; base and end are storage positions of a segment,
// for operators: clients never address records by them.
type (
	topicJSON struct {
		ID           uint64      `json:"id"`
		Name         string      `json:"name"`
		KeyspaceBits uint8       `json:"keyspace_bits"`
		CreatedAt    string      `json:"created_at,omitempty"`
		Records      uint64      `json:"records"`
		Bytes        uint64      `json:"bytes"`
		Ranges       []rangeJSON `json:"ranges"`
		Groups       []string    `json:"groups"`
		// GroupsOmitted counts groups the node left out of Groups to keep
		// its first page within bounds (group list names them all).
		GroupsOmitted int `json:"groups_omitted,omitempty"`
		// CopiesOmitted counts the last segments whose copies the node
		// left out to keep its answer within a frame.
		CopiesOmitted int `json:"copies_omitted,omitempty"`
		// RangesTotal and ActiveRangesTotal count the topic's ranges;
		// Ranges may list fewer (--active, --limit: then Truncated).
		RangesTotal       int  `json:"ranges_total"`
		ActiveRangesTotal int  `json:"active_ranges_total"`
		Truncated         bool `json:"truncated,omitempty"`
	}
	rangeJSON struct {
		ID        uint64        `json:"id"`
		Start     uint64        `json:"start"`
		End       uint64        `json:"end"`
		Active    bool          `json:"active"`
		Parents   []uint64      `json:"parents"`
		CreatedAt string        `json:"created_at,omitempty"`
		SealedAt  string        `json:"sealed_at,omitempty"`
		Records   uint64        `json:"records"`
		Bytes     uint64        `json:"bytes"`
		Segments  []segmentJSON `json:"segments"`
		// SegmentsOmitted counts the oldest segments left out of a range
		// too large for one page of the node's answer.
		SegmentsOmitted int `json:"segments_omitted,omitempty"`
	}
	segmentJSON struct {
		ID       uint64   `json:"id"`
		Active   bool     `json:"active"`
		Replicas []string `json:"replicas"`
		Primary  string   `json:"primary,omitempty"`
		// Watermark is set for the active segment of a replicated range:
		// its commit watermark as the answering node knows it.
		Watermark *uint64 `json:"watermark,omitempty"`
		Records   uint64  `json:"records"`
		Bytes     uint64  `json:"bytes"`
		Base      uint64  `json:"base"`
		End       uint64  `json:"end"`
		OpenedAt  string  `json:"opened_at,omitempty"`
		SealedAt  string  `json:"sealed_at,omitempty"`
		MaxExpiry string  `json:"max_expiry,omitempty"`
		// Copies are the segment's copies with their state (unchecked,
		// damaged, healing, missing) as the answering node sees them;
		// absent from a single node or an older one.
		Copies []client.SegmentCopy `json:"copies,omitempty"`
	}
)

func describeJSON(d *client.TopicDescription) topicJSON {
	t := topicJSON{
		ID: d.ID, Name: d.Name, KeyspaceBits: d.KeyspaceBits, CreatedAt: jsonTime(d.CreatedAt),
		Ranges: make([]rangeJSON, len(d.Ranges)), Groups: nonNil(d.Groups), GroupsOmitted: d.GroupsOmitted, CopiesOmitted: d.CopiesOmitted,
		RangesTotal: d.RangesTotal, ActiveRangesTotal: d.ActiveRangesTotal, Truncated: d.Truncated,
	}
	for i := range d.Ranges {
		r := &d.Ranges[i]
		rj := rangeJSON{
			ID: r.ID, Start: r.Start, End: r.End, Active: r.Active, Parents: nonNil(r.Parents),
			CreatedAt: jsonTime(r.CreatedAt), SealedAt: jsonTime(r.SealedAt),
			Records: r.Records(), Bytes: rangeBytes(r), Segments: make([]segmentJSON, len(r.Segments)),
			SegmentsOmitted: r.SegmentsOmitted,
		}
		for j, s := range r.Segments {
			rj.Segments[j] = segmentJSON{
				ID: s.ID, Active: s.Active, Replicas: nonNil(s.Replicas), Primary: s.Primary(), Records: s.Records, Bytes: s.Bytes,
				Base: s.Base, End: s.End, OpenedAt: jsonTime(s.OpenedAt), SealedAt: jsonTime(s.SealedAt),
				MaxExpiry: jsonTime(s.MaxExpiry), Copies: s.Copies,
			}
			if wm, ok := s.Watermark(); ok {
				rj.Segments[j].Watermark = &wm
			}
		}
		t.Records += rj.Records
		t.Bytes += rj.Bytes
		t.Ranges[i] = rj
	}
	return t
}

// nonNil makes empty lists print as [] rather than null, so that JSON
// consumers can iterate without a check.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func rangeBytes(r *client.RangeInfo) uint64 {
	var n uint64
	for _, s := range r.Segments {
		n += s.Bytes
	}
	return n
}

// printDescription writes the topic's summary, then its ranges, then its
// segments, as aligned text.
func printDescription(out *printer, d *client.TopicDescription, now time.Time) error {
	var records, bytes uint64
	active := 0
	for i := range d.Ranges {
		records += d.Ranges[i].Records()
		bytes += rangeBytes(&d.Ranges[i])
		if d.Ranges[i].Active {
			active++
		}
	}
	err := out.fields([][2]string{
		{"Topic", d.Name},
		{"ID", itoa(d.ID)},
		{"Keyspace", fmt.Sprintf("%d bits (%d key positions)", d.KeyspaceBits, uint64(1)<<d.KeyspaceBits)},
		{"Created", humanTime(d.CreatedAt, now)},
		{"Ranges", rangesCell(max(active, d.ActiveRangesTotal), max(len(d.Ranges), d.RangesTotal))},
		{"Records", itoa(records)},
		{"Bytes", humanBytes(bytes)},
		{"Groups", groupsCell(d)},
	})
	if err != nil {
		return err
	}
	if listed := len(d.Ranges); d.Truncated || listed < d.RangesTotal {
		fmt.Fprintf(out.w, "Listed %s of %d; records and bytes are of the listed ranges\n", countOf(listed, "range"), d.RangesTotal)
	}
	fmt.Fprintln(out.w, "\nRanges")
	if err := out.table([]string{"ID", "STATE", "KEY SLICE", "SHARE", "PARENTS", "SEGMENTS", "RECORDS", "BYTES"}, rangeRows(d)); err != nil {
		return err
	}
	fmt.Fprintln(out.w, "\nSegments")
	header := []string{"ID", "RANGE", "STATE", "PRIMARY", "REPLICAS", "WATERMARK", "RECORDS", "BYTES", "OPENED"}
	if hasCopies(d) {
		header[4] = "COPIES"
	}
	if d.CopiesOmitted > 0 {
		fmt.Fprintf(out.w, "Copies of the last %s not reported (the answer would not fit a frame): their replicas are shown\n", countOf(d.CopiesOmitted, "segment"))
	}
	return out.table(header, segmentRows(d, now))
}

// hasCopies reports whether the node reported the segments' copies.
func hasCopies(d *client.TopicDescription) bool {
	if d.CopiesOmitted > 0 {
		return true
	}
	for _, r := range d.Ranges {
		for _, s := range r.Segments {
			if s.Copies != nil {
				return true
			}
		}
	}
	return false
}

// copiesText is a segment's copies with their state, "node-1 unchecked,
// node-2 damaged"; its replica names when the node did not report them.
func copiesText(s client.SegmentInfo, reported bool) string {
	if !reported {
		return orDefault(strings.Join(s.Replicas, ","), "-")
	}
	parts := make([]string, 0, len(s.Copies))
	for _, c := range s.Copies {
		parts = append(parts, c.Node+" "+c.State)
	}
	return orDefault(strings.Join(parts, ", "), "-")
}

func rangeRows(d *client.TopicDescription) [][]string {
	rows := make([][]string, 0, len(d.Ranges))
	for i := range d.Ranges {
		r := &d.Ranges[i]
		rows = append(rows, []string{
			itoa(r.ID), state(r.Active), slice(r.Start, r.End, d.KeyspaceBits), share(r.Start, r.End, d.KeyspaceBits),
			joinUints(r.Parents), segmentsCell(r), itoa(r.Records()), humanBytes(rangeBytes(r)),
		})
	}
	return rows
}

// segmentsCell is a range's segment count, "3", or "3 (+40 older not
// listed)" when the node left its oldest out.
func segmentsCell(r *client.RangeInfo) string {
	if r.SegmentsOmitted == 0 {
		return itoa(len(r.Segments))
	}
	return fmt.Sprintf("%d (+%d older not listed)", len(r.Segments), r.SegmentsOmitted)
}

func segmentRows(d *client.TopicDescription, now time.Time) [][]string {
	var rows [][]string
	copies := hasCopies(d)
	for i := range d.Ranges {
		r := &d.Ranges[i]
		for _, s := range r.Segments {
			wm := "-"
			if w, ok := s.Watermark(); ok {
				wm = itoa(w)
			}
			rows = append(rows, []string{
				itoa(s.ID), itoa(r.ID), state(s.Active), orDefault(s.Primary(), "-"), copiesText(s, copies && s.Copies != nil),
				wm, itoa(s.Records), humanBytes(s.Bytes), humanTime(s.OpenedAt, now),
			})
		}
	}
	return rows
}

func state(active bool) string {
	if active {
		return "active"
	}
	return "sealed"
}

// slice renders a range's key positions [start, end) in hex as the
// inclusive "first-last", padded to the keyspace's width so that the
// column lines up.
func slice(start, end uint64, bits uint8) string {
	w := (int(bits) + 3) / 4
	return fmt.Sprintf("%#0*x-%#0*x", w, start, w, end-1)
}

// share is the fraction of the keyspace a range owns, as a percentage.
func share(start, end uint64, bits uint8) string {
	pct := float64(end-start) / float64(uint64(1)<<bits) * 100
	return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.2f", pct), "0"), ".0") + "%"
}

// groupsCell names the topic's groups and counts those the node left out.
func groupsCell(d *client.TopicDescription) string {
	cell := orDefault(strings.Join(d.Groups, ", "), "-")
	if d.GroupsOmitted > 0 {
		cell += fmt.Sprintf(" and %d more (malachi group list %s)", d.GroupsOmitted, d.Name)
	}
	return cell
}
