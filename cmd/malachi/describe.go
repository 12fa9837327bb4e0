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
	}
)

func describeJSON(d *client.TopicDescription) topicJSON {
	t := topicJSON{
		ID: d.ID, Name: d.Name, KeyspaceBits: d.KeyspaceBits, CreatedAt: jsonTime(d.CreatedAt),
		Ranges: make([]rangeJSON, len(d.Ranges)), Groups: nonNil(d.Groups),
	}
	for i := range d.Ranges {
		r := &d.Ranges[i]
		rj := rangeJSON{
			ID: r.ID, Start: r.Start, End: r.End, Active: r.Active, Parents: nonNil(r.Parents),
			CreatedAt: jsonTime(r.CreatedAt), SealedAt: jsonTime(r.SealedAt),
			Records: r.Records(), Bytes: rangeBytes(r), Segments: make([]segmentJSON, len(r.Segments)),
		}
		for j, s := range r.Segments {
			rj.Segments[j] = segmentJSON{
				ID: s.ID, Active: s.Active, Replicas: nonNil(s.Replicas), Primary: s.Primary(), Records: s.Records, Bytes: s.Bytes,
				Base: s.Base, End: s.End, OpenedAt: jsonTime(s.OpenedAt), SealedAt: jsonTime(s.SealedAt),
				MaxExpiry: jsonTime(s.MaxExpiry),
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
		{"Ranges", rangesCell(active, len(d.Ranges))},
		{"Records", itoa(records)},
		{"Bytes", humanBytes(bytes)},
		{"Groups", orDefault(strings.Join(d.Groups, ", "), "-")},
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out.w, "\nRanges")
	if err := out.table([]string{"ID", "STATE", "KEY SLICE", "SHARE", "PARENTS", "SEGMENTS", "RECORDS", "BYTES"}, rangeRows(d)); err != nil {
		return err
	}
	fmt.Fprintln(out.w, "\nSegments")
	return out.table([]string{"ID", "RANGE", "STATE", "PRIMARY", "REPLICAS", "WATERMARK", "RECORDS", "BYTES", "OPENED"}, segmentRows(d, now))
}

func rangeRows(d *client.TopicDescription) [][]string {
	rows := make([][]string, 0, len(d.Ranges))
	for i := range d.Ranges {
		r := &d.Ranges[i]
		rows = append(rows, []string{
			itoa(r.ID), state(r.Active), slice(r.Start, r.End, d.KeyspaceBits), share(r.Start, r.End, d.KeyspaceBits),
			joinUints(r.Parents), itoa(len(r.Segments)), itoa(r.Records()), humanBytes(rangeBytes(r)),
		})
	}
	return rows
}

func segmentRows(d *client.TopicDescription, now time.Time) [][]string {
	var rows [][]string
	for i := range d.Ranges {
		r := &d.Ranges[i]
		for _, s := range r.Segments {
			wm := "-"
			if w, ok := s.Watermark(); ok {
				wm = itoa(w)
			}
			rows = append(rows, []string{
				itoa(s.ID), itoa(r.ID), state(s.Active), orDefault(s.Primary(), "-"), orDefault(strings.Join(s.Replicas, ","), "-"),
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
