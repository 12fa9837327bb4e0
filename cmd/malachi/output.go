package main

import (
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

// doc writes v as one indented JSON document.
func (p *printer) doc(v any) error {
	enc := json.NewEncoder(p.w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes rows under an upper-case header, columns aligned.
func (p *printer) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// fields writes "Name  value" pairs, names aligned.
func (p *printer) fields(pairs [][2]string) error {
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	for _, kv := range pairs {
		fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
	}
	return tw.Flush()
}

// textf writes a line of the text result (nothing in JSON mode, where
// the caller writes a document instead).
func (p *printer) textf(format string, args ...any) {
	if !p.json {
		fmt.Fprintf(p.w, format+"\n", args...)
	}
}

// notef writes a hint or note to stderr, in text mode only: JSON users
// parse stdout and read nothing else.
func (p *printer) notef(format string, args ...any) {
	if !p.json {
		fmt.Fprintf(p.errw, format+"\n", args...)
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
