package membership

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// memberlistLogger adapts memberlist's *log.Logger to slog: every line is
// logged at debug level, with memberlist's own level ("[WARN]") kept as an
// attribute. Events that matter to operators (conflicts, refusals) are
// logged by this package at their proper level.
func memberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

// Write receives one formatted line per call (log.Logger's contract).
func (w slogWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := ""
	if len(line) > 0 && line[0] == '[' {
		if end := bytes.IndexByte(line, ']'); end > 0 {
			level, line = string(line[1:end]), bytes.TrimSpace(line[end+1:])
		}
	}
	line = bytes.TrimPrefix(line, []byte("memberlist: "))
	w.l.LogAttrs(context.Background(), slog.LevelDebug, string(line), slog.String("component", "memberlist"), slog.String("memberlist_level", level))
	return len(p), nil
}
