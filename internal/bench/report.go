package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Stats is what one side of a run achieved.
type Stats struct {
	// Records and Bytes completed: acked (produce) or received and
	// counted (consume, e2e). Bytes counts values only.
	Records int64 `json:"records"`
	Bytes   int64 `json:"bytes"`
	// Errors counts records that failed.
	Errors int64 `json:"errors"`
	// ElapsedS runs from the start of the workload (connections already
	// open) to the last completion.
	ElapsedS    float64 `json:"elapsed_s"`
	RecordsPerS float64 `json:"records_per_s"`
	MBPerS      float64 `json:"mb_per_s"` // 10^6 bytes
	// Latency is nil when nothing was timed (consume via group).
	Latency *Latency `json:"latency"`
}

// Result is the outcome of a run. Its JSON form is the machine-readable
// report: the config, then the main side's Stats flattened, then for e2e
// the producers' side under "produce".
type Result struct {
	Config Config `json:"config"`
	// Wire is the wire protocol version the connections spoke (1 or 2).
	Wire int `json:"wire"`
	Stats
	Produce *Stats `json:"produce,omitempty"`
}

// WriteJSON writes r as one indented JSON document.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r for people.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	b.WriteString(string(r.Config.Mode))
	if r.Wire > 0 {
		fmt.Fprintf(&b, " wire=v%d", r.Wire)
	}
	fmt.Fprintf(&b, " %s\n", r.Config.describe())
	switch r.Config.Mode {
	case Produce:
		writeStats(&b, "produced", "latency", &r.Stats)
	case Consume:
		writeStats(&b, "consumed", "latency", &r.Stats)
	default:
		writeStats(&b, "consumed", "e2e", &r.Stats)
	}
	if r.Produce != nil {
		writeStats(&b, "produced", "ack", r.Produce)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeStats writes a side's counts as label and its latency as latLabel.
func writeStats(b *strings.Builder, label, latLabel string, s *Stats) {
	fmt.Fprintf(b, "  %-9s %s records, %s MB in %.2f s: %s rec/s, %.2f MB/s",
		label, group(s.Records), strconv.FormatFloat(float64(s.Bytes)/1e6, 'f', 1, 64),
		s.ElapsedS, group(int64(s.RecordsPerS+0.5)), s.MBPerS)
	if s.Errors > 0 {
		fmt.Fprintf(b, ", %s errors", group(s.Errors))
	}
	b.WriteByte('\n')
	if l := s.Latency; l != nil {
		fmt.Fprintf(b, "  %-9s p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (from %s, n=%s)\n",
			latLabel, us(l.P50Us), us(l.P90Us), us(l.P99Us), us(l.P999Us), us(l.MaxUs), l.From, group(l.Count))
	}
}

// describe is the one-line summary of the parameters that matter for the
// mode.
func (c Config) describe() string {
	parts := []string{"topic=" + c.Topic, "records=" + group(c.Records)}
	if c.Mode != Consume {
		parts = append(parts, fmt.Sprintf("size=%dB", c.Size), fmt.Sprintf("keys=%d", c.Keys),
			fmt.Sprintf("producers=%d", c.Producers), c.sendMode())
	}
	if c.Mode != Produce {
		parts = append(parts, fmt.Sprintf("consumers=%d", c.Consumers), "via="+c.Via)
	}
	return strings.Join(parts, " ")
}

func (c Config) sendMode() string {
	s := "async"
	if c.Sync {
		s = "sync"
	} else {
		if c.Compression != "" && c.Compression != "none" {
			s += " compression=" + c.Compression
		}
		if c.Batch > 0 {
			s += fmt.Sprintf(" batch=%d", c.Batch)
		}
		if c.Linger != 0 {
			s += " linger=" + max(c.Linger, 0).String()
		}
	}
	if c.Rate > 0 {
		return s + fmt.Sprintf(" open-loop rate=%g/s", c.Rate)
	}
	return s + " closed-loop"
}

// us formats microseconds the way people read latencies.
func us(v int64) string {
	d := time.Duration(v) * time.Microsecond
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", v)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(v)/1e3)
	default:
		return fmt.Sprintf("%.2fs", float64(v)/1e6)
	}
}

// group formats n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
