package main

import (
	"io"
	"log/slog"

	"github.com/malachi-log/malachi/internal/logcat"
)

// newLogger is the node's logger: text or JSON lines on w, each with its
// event name, in the language asked for (see internal/logcat).
func newLogger(w io.Writer, format, lang, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErr("--log-level %q: want debug, info, warn or error", level)
	}
	l, err := logcat.ParseLang(lang)
	if err != nil {
		return nil, usageErr("--log-lang (or MALACHI_LOCALE): %v", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var inner slog.Handler
	switch format {
	case "text":
		inner = slog.NewTextHandler(w, opts)
	case "json":
		inner = slog.NewJSONHandler(w, opts)
	default:
		return nil, usageErr("--log-format %q: want text or json", format)
	}
	return slog.New(logcat.NewHandler(inner, l)), nil
}
