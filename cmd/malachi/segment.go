package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/segfile"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/pkg/client"
)

// newSegmentCmd groups the commands that read a segment file by
// themselves: a copy a node set aside in its quarantine, or one taken off
// a damaged disk.
func newSegmentCmd(a *app) *cobra.Command {
	cmd := parentCmd("segment", "Read a segment file offline and produce its records again",
		`  malachi segment inspect /data/segments/quarantine/00000000000000000042.log
  malachi segment replay /data/segments/quarantine/00000000000000000042.log --topic orders --dry-run`,
		newSegmentInspectCmd(a), newSegmentReplayCmd(a))
	cmd.Long = `A node never reads the files it moves into <data>/segments/quarantine/ (a
copy of a segment the cluster recorded lost, or a damaged copy) again.
'segment inspect' reads such a file, or any segment .log file, without a
node and without trusting it: it checks the file header and every batch
(framing, CRC, records, offset order) and says what the file holds and
where it is damaged. 'segment replay' produces the records of its valid
batches into a topic through a node, as a producer would.

Work on a copy of the file: take it out of the quarantine first (cp), and
leave the node's data directory as it is.`
	return cmd
}

type inspectFlags struct {
	skipDamaged bool
	records     bool
	limit       int
	from, to    uint64
	format      string
	truncate    int
}

func newSegmentInspectCmd(a *app) *cobra.Command {
	f := &inspectFlags{}
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Check a segment file and summarise it, or print its records (no node needed)",
		Long: `Walk a segment .log file batch by batch and print what it holds: the segment
id and base offset from its file header, the seal footer when a .seal file
of the same name lies beside it (and whether the file agrees with it), the
valid batches, records, offsets, bytes and times, and every damaged span.

Nothing in the file is trusted: each batch's declared length is bounded by
the bytes left in the file and by the format's 32 MiB limit before it is
read, and a batch counts as valid only when its header parses, its CRC
matches, its records decode and its offsets follow the batch before it.
The walk stops at the first damaged batch and reports its byte position
and why; --skip-damaged scans on for the next valid batch, as a node's
recovery does, and reports each damaged span.

--records prints the records of the valid batches, at most --limit of them
(0 for all), from --from to --to (offsets, inclusive): the offset, the
timestamp, the key and the value escaped and cut at --truncate bytes, the
headers and the expiry. With --format json they are the JSON lines of
'malachi consume --format json' (base64 where not UTF-8, header keys
included; a time RFC 3339 cannot write, past year 9999, as unix
milliseconds) plus "offset", "expiry" and "tombstone".
'malachi produce --format json' reads these lines back as records with
their key, value, headers and timestamp, and ignores "offset", "expiry"
and "tombstone": the topic gives new offsets, no expiry is set, and a
tombstone comes back as an empty value ('segment replay' sends expiries
as TTLs). With --records the summary goes to standard error.

The exit status is 0 for a whole, undamaged file, and 1 when something is
damaged (after the report).`,
		Example: `  malachi segment inspect 00000000000000000042.log
  malachi segment inspect 00000000000000000042.log --skip-damaged
  malachi segment inspect 00000000000000000042.log --records --limit 20
  malachi segment inspect 00000000000000000042.log --records --from 1200 --to 1300 --format json
  malachi segment inspect 00000000000000000042.log -o json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := a.printer(cmd)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("to") {
				f.to = ^uint64(0)
			}
			if err := f.check(); err != nil {
				return err
			}
			return runInspect(cmd.Context(), out, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.skipDamaged, "skip-damaged", false, "scan past a damaged batch for the next valid one instead of stopping there")
	fl.BoolVar(&f.records, "records", false, "print the records of the valid batches")
	fl.IntVar(&f.limit, "limit", 100, "with --records, print at most this many records (0 for all)")
	fl.Uint64Var(&f.from, "from", 0, "with --records, the first offset to print")
	fl.Uint64Var(&f.to, "to", 0, "with --records, the last offset to print (default: the last)")
	fl.StringVar(&f.format, "format", "text", `with --records, "text" (escaped and cut) or "json" (JSON lines, base64 where needed)`)
	fl.IntVar(&f.truncate, "truncate", 64, "with --records in text, show at most this many bytes of each key, value and header value (0 for all)")
	return cmd
}

func (f *inspectFlags) check() error {
	switch {
	case f.format != "text" && f.format != "json":
		return usageErr("--format is text or json, not %q", f.format)
	case f.limit < 0:
		return usageErr("--limit cannot be negative")
	case f.truncate < 0:
		return usageErr("--truncate cannot be negative")
	case f.from > f.to:
		return usageErr("--from %d is after --to %d", f.from, f.to)
	}
	return nil
}

// openSegmentFile opens a segment file for reading and returns its size.
func openSegmentFile(path string) (*os.File, int64, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, 0, &exitError{code: 1, err: err}
	}
	st, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, 0, &exitError{code: 1, err: err}
	}
	if !st.Mode().IsRegular() {
		file.Close()
		return nil, 0, usageErr("%s is not a regular file", path)
	}
	return file, st.Size(), nil
}

func runInspect(ctx context.Context, out *printer, path string, f *inspectFlags) error {
	file, size, err := openSegmentFile(path)
	if err != nil {
		return err
	}
	defer file.Close()
	w := bufio.NewWriter(out.w)
	printed, cut := 0, false
	var visit func(segfile.Batch) error
	if f.records {
		write := f.textRecord
		if f.format == "json" {
			write = writeSegmentJSONRecord
		}
		visit = func(b segfile.Batch) error {
			// Skip the batches with nothing to print: walking their
			// records would decompress them again for nothing.
			if cut || b.Header.LastOffset() < f.from || b.Header.BaseOffset > f.to {
				return nil
			}
			return b.Records(func(r *batch.Record) error {
				switch {
				case cut || r.Offset < f.from || r.Offset > f.to:
					return nil
				case f.limit > 0 && printed >= f.limit:
					cut = true // a record asked for is left out
					return nil
				}
				printed++
				return write(w, r)
			})
		}
	}
	sum, err := segfile.Scan(ctx, file, size, segfile.Options{SkipDamaged: f.skipDamaged}, visit)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("%s: %w", path, err)}
	}
	rep := newSegmentReport(ctx, file, path, sum)
	report := out
	if f.records {
		// The records are the result; the summary is a note beside them.
		report = &printer{json: out.json, w: out.errw, errw: out.errw}
	}
	if err := rep.print(report, f.skipDamaged); err != nil {
		return err
	}
	if cut {
		out.notef("printed the first %d records; --limit 0 prints them all", f.limit)
	}
	if !sum.Clean() || rep.Footer != nil && !rep.Footer.Agrees {
		return &exitError{code: 1, err: errors.New(rep.damageLine(path))}
	}
	return nil
}

// segmentReport is what inspect says of a file, for people and for -o json.
type segmentReport struct {
	File        string         `json:"file"`
	Size        int64          `json:"size"`
	Segment     *segmentIDs    `json:"segment,omitempty"`
	HeaderError string         `json:"header_error,omitempty"`
	Footer      *footerReport  `json:"footer,omitempty"`
	Batches     uint64         `json:"batches"`
	Records     uint64         `json:"records"`
	FirstOffset *uint64        `json:"first_offset,omitempty"`
	LastOffset  *uint64        `json:"last_offset,omitempty"`
	Bytes       int64          `json:"bytes"`
	FirstTime   string         `json:"first_timestamp,omitempty"`
	LastTime    string         `json:"last_timestamp,omitempty"`
	MaxExpiry   string         `json:"max_expiry,omitempty"`
	Damaged     []damageReport `json:"damaged"`
	DamageCount int            `json:"damaged_spans"`
	DamageBytes int64          `json:"damaged_bytes"`
	Complete    bool           `json:"complete"`
}

type segmentIDs struct {
	ID    uint64 `json:"id"`
	Base  uint64 `json:"base"`
	Owner uint32 `json:"owner_tag"`
}

type footerReport struct {
	Path          string   `json:"path"`
	Error         string   `json:"error,omitempty"`
	ID            uint64   `json:"id"`
	Base          uint64   `json:"base"`
	End           uint64   `json:"end"`
	Records       uint64   `json:"records"`
	Bytes         int64    `json:"bytes"`
	ContentHash   string   `json:"content_hash"`
	Generation    uint32   `json:"generation"`
	Agrees        bool     `json:"agrees"`
	Disagreements []string `json:"disagreements,omitempty"`
}

type damageReport struct {
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Bytes  int64  `json:"bytes"`
	Reason string `json:"reason"`
}

func newSegmentReport(ctx context.Context, file io.ReaderAt, path string, sum segfile.Summary) *segmentReport {
	r := &segmentReport{File: path, Size: sum.Size, Batches: sum.Batches, Records: sum.Records, Bytes: sum.Bytes,
		DamageCount: sum.DamagedSpans, DamageBytes: sum.DamagedBytes, Complete: !sum.Stopped, Damaged: []damageReport{}}
	if sum.HeaderErr != nil {
		r.HeaderError = sum.HeaderErr.Error()
	} else {
		r.Segment = &segmentIDs{ID: sum.Header.ID, Base: sum.Header.Base, Owner: sum.Header.Owner}
	}
	if sum.Records > 0 {
		first, last := sum.FirstOffset, sum.LastOffset
		r.FirstOffset, r.LastOffset = &first, &last
		r.FirstTime, r.LastTime = msTime(sum.MinTimestamp), msTime(sum.MaxTimestamp)
		if sum.MaxExpiry != 0 {
			r.MaxExpiry = msTime(sum.MaxExpiry)
		}
	}
	for _, sp := range sum.Damaged {
		r.Damaged = append(r.Damaged, damageReport{Start: sp.Start, End: sp.End, Bytes: sp.End - sp.Start, Reason: sp.Reason})
	}
	r.Footer = readFooterBeside(ctx, file, path, &sum)
	return r
}

// sealFileLimit bounds what is read of a .seal file: it is 80 bytes.
const sealFileLimit = 4 << 10

// readFooterBeside reads the .seal file beside path, if there is one,
// and compares the file with it.
func readFooterBeside(ctx context.Context, file io.ReaderAt, path string, sum *segfile.Summary) *footerReport {
	seal := strings.TrimSuffix(path, filepath.Ext(path)) + ".seal"
	if seal == path {
		return nil
	}
	sf, err := os.Open(seal)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	fr := &footerReport{Path: seal}
	if err != nil {
		fr.Error = err.Error()
		return fr
	}
	defer sf.Close()
	b, err := io.ReadAll(io.LimitReader(sf, sealFileLimit))
	if err != nil {
		fr.Error = err.Error()
		return fr
	}
	id, ft, err := segment.UnmarshalFooter(b)
	if err != nil {
		fr.Error = err.Error()
		return fr
	}
	fr.ID, fr.Base, fr.End, fr.Records, fr.Bytes, fr.Generation = id, ft.Base, ft.End, ft.Records, ft.Bytes, ft.Generation
	fr.ContentHash = fmt.Sprintf("%#016x", ft.ContentHash)
	hash, err := segfile.ContentHash(ctx, file, sum.Size)
	if err != nil {
		fr.Error = err.Error()
		return fr
	}
	if err := sum.CheckFooter(id, ft, hash); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fr.Disagreements = append(fr.Disagreements, line)
		}
	} else {
		fr.Agrees = true
	}
	return fr
}

func (r *segmentReport) print(out *printer, skipping bool) error {
	if out.json {
		return out.doc(r)
	}
	pairs := [][2]string{{"File", fmt.Sprintf("%s (%d bytes)", r.File, r.Size)}}
	if r.Segment != nil {
		pairs = append(pairs, [2]string{"Segment", fmt.Sprintf("id %d, base offset %d, owner tag %#08x", r.Segment.ID, r.Segment.Base, r.Segment.Owner)})
	} else {
		pairs = append(pairs, [2]string{"Segment", "file header unreadable: " + r.HeaderError})
	}
	if fr := r.Footer; fr != nil {
		var s string
		switch {
		case fr.Error != "":
			s = fmt.Sprintf("%s: unreadable: %s", filepath.Base(fr.Path), fr.Error)
		default:
			s = fmt.Sprintf("%s: segment %d, offsets %d up to %d, %d records, %d bytes, generation %d; ",
				filepath.Base(fr.Path), fr.ID, fr.Base, fr.End, fr.Records, fr.Bytes, fr.Generation)
			if fr.Agrees {
				s += "the file agrees with it"
			} else {
				s += "the file disagrees: " + strings.Join(fr.Disagreements, "; ")
			}
		}
		pairs = append(pairs, [2]string{"Seal footer", s})
	}
	pairs = append(pairs, [2]string{"Batches", fmt.Sprintf("%d valid, %d bytes", r.Batches, r.Bytes)})
	if r.FirstOffset != nil {
		pairs = append(pairs,
			[2]string{"Records", fmt.Sprintf("%d, offsets %d to %d", r.Records, *r.FirstOffset, *r.LastOffset)},
			[2]string{"Timestamps", r.FirstTime + " to " + r.LastTime})
		expiry := "some records never expire"
		if r.MaxExpiry != "" {
			expiry = "every record has expired by " + r.MaxExpiry
		}
		pairs = append(pairs, [2]string{"Expiry", expiry})
	} else {
		pairs = append(pairs, [2]string{"Records", "none"})
	}
	if r.DamageCount == 0 {
		pairs = append(pairs, [2]string{"Damage", "none"})
	} else {
		pairs = append(pairs, [2]string{"Damage", fmt.Sprintf("%d span%s, %d bytes", r.DamageCount, plural(r.DamageCount), r.DamageBytes)})
		for _, d := range r.Damaged {
			pairs = append(pairs, [2]string{"", fmt.Sprintf("bytes %d-%d (%d): %s", d.Start, d.End, d.Bytes, d.Reason)})
		}
		if r.DamageCount > len(r.Damaged) {
			pairs = append(pairs, [2]string{"", fmt.Sprintf("and %d more spans", r.DamageCount-len(r.Damaged))})
		}
	}
	if err := out.fields(pairs); err != nil {
		return err
	}
	if !r.Complete && !skipping {
		out.notef("the walk stopped at the first damaged batch; --skip-damaged looks for valid batches after it")
	}
	return nil
}

// damageLine is the error inspect ends with when the file is not whole.
func (r *segmentReport) damageLine(path string) string {
	var what []string
	if r.HeaderError != "" {
		what = append(what, "its file header is unreadable")
	}
	if r.DamageCount > 0 {
		what = append(what, fmt.Sprintf("%d damaged span%s (the first at byte %d)", r.DamageCount, plural(r.DamageCount), r.Damaged[0].Start))
	}
	switch fr := r.Footer; {
	case fr != nil && fr.Error != "":
		what = append(what, "its seal footer is unreadable")
	case fr != nil && !fr.Agrees:
		what = append(what, "it does not match its seal footer")
	}
	return fmt.Sprintf("%s is damaged: %s", path, strings.Join(what, "; "))
}

// msTime renders unix milliseconds as RFC 3339 in UTC.
func msTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// textRecord writes one record as a line for people: every field escaped
// (see showBytes), so that no byte of the file reaches the terminal raw.
func (f *inspectFlags) textRecord(w *bufio.Writer, r *batch.Record) error {
	fmt.Fprintf(w, "offset %d  time %s  key %s  value %s", r.Offset, msTime(r.Timestamp), f.show(r.Key), f.show(r.Value))
	if len(r.Headers) > 0 {
		w.WriteString("  headers")
		for _, h := range r.Headers {
			fmt.Fprintf(w, " %s=%s", f.show(h.Key), f.show(h.Value))
		}
	}
	if r.Expiry != 0 {
		fmt.Fprintf(w, "  expires %s", msTime(r.Expiry))
	}
	return w.WriteByte('\n')
}

// show quotes b with every byte a terminal could act on escaped (Go
// syntax: \n, \x1b, \u202e), cut at --truncate bytes with the rest
// counted; "-" stands for nil (no key, a tombstone).
func (f *inspectFlags) show(b []byte) string {
	if b == nil {
		return "-"
	}
	cut := b
	if f.truncate > 0 && len(b) > f.truncate {
		n := f.truncate
		// Cut on a rune boundary when there is one near.
		for i := 0; i < utf8.UTFMax && n > 0 && !utf8.RuneStart(b[n]); i++ {
			n--
		}
		cut = b[:n]
	}
	s := safeText(strconv.Quote(string(cut)))
	if len(cut) < len(b) {
		s += fmt.Sprintf("…(%d more bytes)", len(b)-len(cut))
	}
	return s
}

// segmentJSONRecord is a line of 'segment inspect --records --format
// json': consume's JSON record, which produce --format json reads back,
// with what a segment knows besides.
type segmentJSONRecord struct {
	Offset uint64 `json:"offset"`
	jsonRecord
	// Timestamp and Expiry are segmentJSONTime's.
	Timestamp any  `json:"timestamp"`
	Expiry    any  `json:"expiry,omitempty"`
	Tombstone bool `json:"tombstone,omitempty"`
}

// segmentJSONTime is unix milliseconds in a segment JSON line: RFC 3339
// in UTC like consume's, or the milliseconds as a number when RFC 3339
// cannot write the year (a producer's timestamp is any it sent), which
// produce --format json reads too.
func segmentJSONTime(ms int64) any {
	t := time.UnixMilli(ms).UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		return ms
	}
	return t.Format(time.RFC3339Nano)
}

func writeSegmentJSONRecord(w *bufio.Writer, r *batch.Record) error {
	j := segmentJSONRecord{Offset: r.Offset, Tombstone: r.Value == nil, Timestamp: segmentJSONTime(r.Timestamp)}
	if r.Expiry != 0 {
		j.Expiry = segmentJSONTime(r.Expiry)
	}
	if r.Key != nil {
		var k string
		k, j.KeyBase64 = textOrBase64(r.Key)
		j.Key = &k
	}
	j.Value, j.ValueBase64 = textOrBase64(r.Value)
	for _, h := range r.Headers {
		j.Headers = append(j.Headers, jsonHeaderOf(h.Key, h.Value))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(j); err != nil {
		return err
	}
	_, err := w.Write(safeJSON(buf.Bytes()))
	return err
}

// clientRecord is r as a producer sends it: the bytes alias r's.
func clientRecord(r *batch.Record) client.Record {
	rec := client.Record{Key: r.Key, Value: r.Value, Timestamp: time.UnixMilli(r.Timestamp)}
	if len(r.Headers) > 0 {
		rec.Headers = make([]client.Header, len(r.Headers))
		for i, h := range r.Headers {
			rec.Headers[i] = client.Header{Key: string(h.Key), Value: h.Value}
		}
	}
	return rec
}
