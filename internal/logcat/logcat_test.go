package logcat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/logcat"
)

const (
	listed   = "heal: a verified copy was recorded"
	unlisted = "a message no catalog holds"
)

// jsonLogger returns a logger through logcat to a JSON handler, and the
// buffer it writes.
func jsonLogger(lang logcat.Lang, level slog.Level) (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	inner := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level})
	return slog.New(logcat.NewHandler(inner, lang)), &buf
}

// decode parses each JSON line of buf.
func decode(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func one(t *testing.T, buf *bytes.Buffer) map[string]any {
	t.Helper()
	recs := decode(t, buf)
	if len(recs) != 1 {
		t.Fatalf("want one record, got %d: %q", len(recs), buf.String())
	}
	return recs[0]
}

func TestListedMessageGetsItsEvent(t *testing.T) {
	log, buf := jsonLogger(logcat.EnUS, slog.LevelInfo)
	log.Info(listed, "segment", 42)
	rec := one(t, buf)
	if rec["msg"] != listed || rec["event"] != "heal.copy_recorded" || rec["segment"] != float64(42) {
		t.Errorf("got %v", rec)
	}
}

func TestPortugueseReplacesTheMessageNotTheKeys(t *testing.T) {
	log, buf := jsonLogger(logcat.PtBR, slog.LevelInfo)
	log.Warn(listed, "segment", 7, "err", "disk full")
	rec := one(t, buf)
	e, _ := logcat.Lookup(listed)
	if rec["msg"] != e.PtBR || rec["msg"] == listed {
		t.Errorf("msg %q, want %q", rec["msg"], e.PtBR)
	}
	if rec["event"] != e.Event || rec["segment"] != float64(7) || rec["err"] != "disk full" || rec["level"] != "WARN" {
		t.Errorf("got %v", rec)
	}
}

func TestUnlistedMessagePassesThrough(t *testing.T) {
	for _, lang := range logcat.Langs {
		log, buf := jsonLogger(lang, slog.LevelInfo)
		log.Error(unlisted, "k", "v")
		rec := one(t, buf)
		if rec["msg"] != unlisted || rec["event"] != logcat.Unlisted || rec["k"] != "v" {
			t.Errorf("%s: got %v", lang, rec)
		}
	}
}

// countingValue counts how often a handler resolves it, that is how often
// a record holding it is formatted.
type countingValue struct{ n *int }

func (c countingValue) LogValue() slog.Value {
	*c.n++
	return slog.StringValue("resolved")
}

func TestRecordsBelowTheLevelAreNeverFormatted(t *testing.T) {
	log, buf := jsonLogger(logcat.PtBR, slog.LevelWarn)
	var n int
	log.Info(listed, "v", countingValue{&n})
	log.Debug(unlisted, "v", countingValue{&n})
	if buf.Len() != 0 || n != 0 {
		t.Fatalf("below the level: wrote %q, resolved %d values", buf.String(), n)
	}
	if log.Enabled(context.Background(), slog.LevelInfo) || !log.Enabled(context.Background(), slog.LevelError) {
		t.Error("Enabled does not follow the inner handler's level")
	}
	log.Error(listed, "v", countingValue{&n})
	if rec := one(t, buf); rec["v"] != "resolved" || n != 1 {
		t.Errorf("at the level: %v, resolved %d", rec, n)
	}
}

// TestAttrsAndGroupsMatchSlog builds the same logger chains on a plain
// JSON handler and through logcat: the output must be the same but for
// the event attribute, which stays at the top level inside any group.
func TestAttrsAndGroupsMatchSlog(t *testing.T) {
	chains := map[string]func(*slog.Logger) *slog.Logger{
		"none":               func(l *slog.Logger) *slog.Logger { return l },
		"with":               func(l *slog.Logger) *slog.Logger { return l.With("node", 3) },
		"group":              func(l *slog.Logger) *slog.Logger { return l.WithGroup("g") },
		"with group with":    func(l *slog.Logger) *slog.Logger { return l.With("a", 1).WithGroup("g").With("b", 2) },
		"nested groups":      func(l *slog.Logger) *slog.Logger { return l.WithGroup("g").With("b", 2).WithGroup("h").With("c", 3) },
		"empty nested group": func(l *slog.Logger) *slog.Logger { return l.WithGroup("g").WithGroup("h") },
		"empty group name":   func(l *slog.Logger) *slog.Logger { return l.With("a", 1).WithGroup("").With("b", 2) },
	}
	records := map[string]func(*slog.Logger){
		"attrs":    func(l *slog.Logger) { l.Info(listed, "segment", 9, slog.Group("seal", "bytes", 10)) },
		"no attrs": func(l *slog.Logger) { l.Info(listed) },
	}
	for cname, chain := range chains {
		for rname, record := range records {
			var plain, wrapped bytes.Buffer
			noTime := &slog.HandlerOptions{ReplaceAttr: dropTime}
			record(chain(slog.New(slog.NewJSONHandler(&plain, noTime))))
			record(chain(slog.New(logcat.NewHandler(slog.NewJSONHandler(&wrapped, noTime), logcat.EnUS))))
			want := one(t, &plain)
			got := one(t, &wrapped)
			if got["event"] != "heal.copy_recorded" {
				t.Errorf("%s, %s: event %v at the top level; record %v", cname, rname, got["event"], got)
			}
			delete(got, "event")
			if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
				t.Errorf("%s, %s:\n got %s\nwant %s", cname, rname, g, w)
			}
		}
	}
}

// A handler made by WithAttrs or WithGroup leaves its parent as it was.
func TestDerivedLoggersDoNotShareAttrs(t *testing.T) {
	log, buf := jsonLogger(logcat.EnUS, slog.LevelInfo)
	g := log.WithGroup("g").With("a", 1)
	_ = g.With("b", 2)
	_ = g.With("c", 3)
	g.Info(listed)
	rec := one(t, buf)
	if got := mustJSON(t, rec["g"]); got != `{"a":1}` {
		t.Errorf("group holds %s, want only a", got)
	}
}

func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTextLinesCarryTheEventAfterTheMessage(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(logcat.NewHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: dropTime}), logcat.PtBR))
	log.Info("node started", "node", "node-1")
	want := `level=INFO msg="nó iniciado" event=node.started node=node-1` + "\n"
	if buf.String() != want {
		t.Errorf("got  %q\nwant %q", buf.String(), want)
	}
}

func TestParseLang(t *testing.T) {
	for _, ok := range []string{"en_US", "pt_BR"} {
		if l, err := logcat.ParseLang(ok); err != nil || string(l) != ok {
			t.Errorf("ParseLang(%q) = %q, %v", ok, l, err)
		}
	}
	for _, bad := range []string{"", "pt", "PT_BR", "fr_FR", "en-US"} {
		if _, err := logcat.ParseLang(bad); err == nil || !strings.Contains(err.Error(), "pt_BR") {
			t.Errorf("ParseLang(%q) = %v, want an error naming the choices", bad, err)
		}
	}
}

func BenchmarkHandler(b *testing.B) {
	for _, c := range []struct {
		name string
		h    func(slog.Handler) slog.Handler
	}{
		{"plain", func(h slog.Handler) slog.Handler { return h }},
		{"en_US", func(h slog.Handler) slog.Handler { return logcat.NewHandler(h, logcat.EnUS) }},
		{"pt_BR", func(h slog.Handler) slog.Handler { return logcat.NewHandler(h, logcat.PtBR) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			log := slog.New(c.h(slog.NewJSONHandler(io.Discard, nil)))
			for b.Loop() {
				log.Info(listed, "segment", 42, "source", "node-2", "bytes", 1<<20)
			}
		})
		b.Run(c.name+"/below-level", func(b *testing.B) {
			log := slog.New(c.h(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})))
			for b.Loop() {
				log.Info(listed, "segment", 42)
			}
		})
	}
}
