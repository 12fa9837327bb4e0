package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"
)

// printer writes a command's result: aligned text for people, or one JSON
// document for programs (-o json). Notes and hints go to errw so that
// stdout stays the result alone.
type printer struct {
	json bool
	w    io.Writer
	errw io.Writer
}

// doc writes v as one indented JSON document, with the characters a
// terminal would act on escaped (see safeJSON).
func (p *printer) doc(v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := p.w.Write(safeJSON(buf.Bytes()))
	return err
}

// table writes rows under an upper-case header, columns aligned. Cells
// are escaped (safeText), which also keeps a tab or newline in a name
// from breaking the columns.
func (p *printer) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, safeRow(header))
	for _, r := range rows {
		fmt.Fprintln(tw, safeRow(r))
	}
	return tw.Flush()
}

func safeRow(cells []string) string {
	safe := make([]string, len(cells))
	for i, c := range cells {
		safe[i] = safeText(c)
	}
	return strings.Join(safe, "\t")
}

// fields writes "Name  value" pairs, names aligned, values escaped.
func (p *printer) fields(pairs [][2]string) error {
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	for _, kv := range pairs {
		fmt.Fprintf(tw, "%s\t%s\n", safeText(kv[0]), safeText(kv[1]))
	}
	return tw.Flush()
}

// textf writes a line of the text result (nothing in JSON mode, where
// the caller writes a document instead). String arguments are escaped;
// the format is the program's own.
func (p *printer) textf(format string, args ...any) {
	if !p.json {
		fmt.Fprintf(p.w, format+"\n", safeArgs(args)...)
	}
}

// notef writes a hint or note to stderr, in text mode only: JSON users
// parse stdout and read nothing else. Arguments are escaped as by textf.
func (p *printer) notef(format string, args ...any) {
	if !p.json {
		fmt.Fprintf(p.errw, format+"\n", safeArgs(args)...)
	}
}

// humanBytes renders n in binary units: 0 B, 512 B, 1.5 KiB, 3.0 GiB.
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// humanTime renders t as local time with its age, "-" for the zero time.
func humanTime(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (%s ago)", t.Local().Format(time.DateTime), humanDuration(now.Sub(t)))
}

// humanDuration rounds d to what a person wants to read: 42s, 5m10s, 3h5m, 2d4h.
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Hour:
		s := d.Round(time.Second).String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		return s
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	days := d / (24 * time.Hour)
	return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
}

// jsonTime is a time for JSON documents: RFC 3339 in UTC, omitted when
// zero (a sealed time of an active range, say).
func jsonTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// isTerminal reports whether f is a terminal: progress and prompts only
// make sense there.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// joinUints renders ids as "1,2,3", or "-" when there are none.
func joinUints(ids []uint64) string {
	if len(ids) == 0 {
		return "-"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ",")
}

func itoa[T ~int | ~uint64 | ~uint8](n T) string { return strconv.FormatUint(uint64(n), 10) }
