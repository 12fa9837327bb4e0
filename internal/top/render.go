package top

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// Num is a figure that may be unknown (NaN): shown "-", encoded null.
type Num float64

// NaN is the unknown figure.
var NaN = Num(math.NaN())

// Known reports whether the figure is known.
func (n Num) Known() bool { return !math.IsNaN(float64(n)) }

// MarshalJSON encodes an unknown figure as null.
func (n Num) MarshalJSON() ([]byte, error) {
	if !n.Known() || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(n), 'f', -1, 64), nil
}

// add sums known figures: unknown plus known is the known one.
func (n Num) add(o Num) Num {
	switch {
	case !o.Known():
		return n
	case !n.Known():
		return o
	}
	return n + o
}

func (n Num) maxOf(o Num) Num {
	if !n.Known() || (o.Known() && o > n) {
		return o
	}
	return n
}

// key orders unknown figures after every known one.
func (n Num) key() float64 {
	if !n.Known() {
		return math.Inf(-1)
	}
	return float64(n)
}

// WriteJSON writes the view as one line of JSON.
func WriteJSON(w io.Writer, v View) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteText writes the view as a header and three tables.
func WriteText(w io.Writer, v View) error {
	t := v.Totals
	var b strings.Builder
	fmt.Fprintf(&b, "malachi top  %s  nodes %d/%d up  produce %s rec/s %s MB/s  fetch %s rec/s  connections %s\n",
		v.At.UTC().Format(time.TimeOnly), t.NodesUp, t.Nodes, rate(t.ProduceRecords), mbps(t.ProduceBytes),
		rate(t.FetchRecords), count(t.Connections))
	fmt.Fprintf(&b, "topics %d  groups %d  max lag %s  under-replicated %s  healing %s  damaged %s\n",
		t.Topics, t.Groups, seconds(t.MaxLagSeconds), count(t.UnderReplicated), count(t.Healing), count(t.Damaged))
	if !v.Interval.Known() {
		b.WriteString("(rates need a second scrape)\n")
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }
	b.WriteString("\n")
	row("NODE", "LIVENESS", "DISK", "PRODUCE/S", "MB/S", "FETCH/S", "P99 PRODUCE", "P99 FSYNC", "CONNS", "LEADS", "UNDER-REPL", "HEALING", "DAMAGED")
	var errs []string
	for _, n := range v.Nodes {
		live := dash(n.Liveness)
		if !n.Up {
			live = "down"
			errs = append(errs, fmt.Sprintf("node %s (%s): %s", clean(n.Name), clean(n.Addr), clean(n.Error)))
		}
		row(clean(n.Name), live, dash(clean(n.Disk)), rate(n.ProduceRecords), mbps(n.ProduceBytes), rate(n.FetchRecords),
			latency(n.ProduceP99), latency(n.FsyncP99), count(n.Connections), count(n.GroupsLed),
			count(n.UnderReplicated), count(n.Healing), count(n.Damaged))
	}
	tw.Flush()
	for _, e := range errs {
		b.WriteString(e + "\n")
	}
	b.WriteString("\n")
	row("TOPIC", "IN REC/S", "IN MB/S", "RECORDS", "BYTES", "RANGES", "GROUPS LAGGING")
	for _, tp := range v.Topics {
		row(clean(tp.Name), rate(tp.RecordsIn), mbps(tp.BytesIn), count(tp.Records), size(tp.Bytes), count(tp.Ranges), strconv.Itoa(tp.GroupsLagging))
	}
	tw.Flush()
	if v.TopicsHidden > 0 {
		fmt.Fprintf(&b, "(%d more topics)\n", v.TopicsHidden)
	}
	b.WriteString("\n")
	row("GROUP", "TOPIC", "LAG RECORDS", "LAG")
	for _, g := range v.Groups {
		row(clean(g.Group), clean(g.Topic), count(g.LagRecords), seconds(g.LagSeconds))
	}
	tw.Flush()
	if v.GroupsHidden > 0 {
		fmt.Fprintf(&b, "(%d more groups)\n", v.GroupsHidden)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clean quotes a name holding characters a terminal would act on.
func clean(s string) string {
	for _, r := range s {
		if !unicode.IsGraphic(r) || r == '\t' {
			return strconv.QuoteToGraphic(s)
		}
	}
	return s
}

func rate(n Num) string {
	if !n.Known() {
		return "-"
	}
	return human(float64(n), 1)
}

func count(n Num) string {
	if !n.Known() {
		return "-"
	}
	return human(float64(n), 0)
}

// human writes v with k, M or G past a thousand.
func human(v float64, prec int) string {
	for _, u := range []struct {
		div  float64
		unit string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if math.Abs(v) >= u.div {
			return strconv.FormatFloat(v/u.div, 'f', 1, 64) + u.unit
		}
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func mbps(n Num) string {
	if !n.Known() {
		return "-"
	}
	return strconv.FormatFloat(float64(n)/1e6, 'f', 2, 64)
}

func size(n Num) string {
	if !n.Known() {
		return "-"
	}
	v := float64(n)
	for _, u := range []struct {
		div  float64
		unit string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if v >= u.div {
			return strconv.FormatFloat(v/u.div, 'f', 1, 64) + u.unit
		}
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + "B"
}

func latency(n Num) string {
	if !n.Known() {
		return "-"
	}
	d := time.Duration(float64(n) * float64(time.Second))
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + "µs"
}

func seconds(n Num) string {
	if !n.Known() {
		return "-"
	}
	return time.Duration(float64(n) * float64(time.Second)).Round(time.Second / 10).String()
}
