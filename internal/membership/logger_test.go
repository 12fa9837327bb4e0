package membership

import (
	"context"
	"log/slog"
	"sync"
	"testing"
)

type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}

// TestMemberlistLogger: memberlist's lines arrive in slog at debug level,
// with memberlist's level as an attribute and its prefix removed.
func TestMemberlistLogger(t *testing.T) {
	h := &recordHandler{}
	l := memberlistLogger(slog.New(h))
	l.Printf("[WARN] memberlist: Refuting a suspect message (from: %s)", "node-2")
	l.Printf("no level here")
	if len(h.records) != 2 {
		t.Fatalf("%d records, want 2", len(h.records))
	}
	r := h.records[0]
	if r.Level != slog.LevelDebug || r.Message != "Refuting a suspect message (from: node-2)" {
		t.Fatalf("record %v %q", r.Level, r.Message)
	}
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	if attrs["memberlist_level"] != "WARN" || attrs["component"] != "memberlist" {
		t.Fatalf("attrs %v", attrs)
	}
	if h.records[1].Message != "no level here" {
		t.Fatalf("second record %q", h.records[1].Message)
	}
}
