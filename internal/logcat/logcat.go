// Package logcat gives every operator log message a stable event name
// and a Brazilian Portuguese text, as a slog.Handler that wraps another.
//
// The code logs in English with a literal message, as usual with slog.
// The catalog maps each such message to its event name and translation;
// the handler adds the attribute event=<name> to every record and, in
// pt_BR, replaces the message. Attribute keys stay in English: machines
// parse them. A message the catalog lacks passes through with
// event=unlisted, so a missing entry never loses a line.
package logcat

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
)

// EventKey is the attribute that carries a record's event name.
const EventKey = "event"

// Unlisted is the event name of a message not in the catalog.
const Unlisted = "unlisted"

// Lang is the language of log messages.
type Lang string

// The languages messages are written in.
const (
	EnUS Lang = "en_US"
	PtBR Lang = "pt_BR"
)

// Langs are the languages ParseLang accepts.
var Langs = []Lang{EnUS, PtBR}

// ParseLang reads a language name: en_US or pt_BR.
func ParseLang(s string) (Lang, error) {
	if l := Lang(s); slices.Contains(Langs, l) {
		return l, nil
	}
	return "", fmt.Errorf("unknown log language %q: want en_US or pt_BR", s)
}

// Entry is one message of the catalog.
type Entry struct {
	Message string // English, exactly as the code logs it
	Event   string // stable, dotted, lowercase: heal.copy_recorded
	PtBR    string // the message in Brazilian Portuguese
}

var byMessage = func() map[string]*Entry {
	m := make(map[string]*Entry, len(catalog))
	for i := range catalog {
		m[catalog[i].Message] = &catalog[i]
	}
	return m
}()

// Lookup returns the entry of an English message.
func Lookup(msg string) (Entry, bool) {
	e, ok := byMessage[msg]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Entries returns a copy of the catalog, in its order.
func Entries() []Entry { return slices.Clone(catalog) }

// handler adds the event name and translates, then hands the record to
// inner. Attributes added after a group was opened are kept here rather
// than in inner, so that the event attribute stays at the top level
// whatever groups the logger opened.
type handler struct {
	inner  slog.Handler // holds the attributes added before any group
	lang   Lang
	groups []group // open groups, outermost first
}

type group struct {
	name  string
	attrs []slog.Attr
}

// NewHandler wraps inner: each record gets event=<name> and, for PtBR,
// its message in Portuguese.
func NewHandler(inner slog.Handler, lang Lang) slog.Handler {
	return &handler{inner: inner, lang: lang}
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	msg, event := r.Message, Unlisted
	if e, ok := byMessage[r.Message]; ok {
		event = e.Event
		if h.lang == PtBR {
			msg = e.PtBR
		}
	}
	// A new record rather than r.AddAttrs: the event goes first, where a
	// reader of text lines looks, and r may share its storage with a copy.
	out := slog.NewRecord(r.Time, r.Level, msg, r.PC)
	out.AddAttrs(slog.String(EventKey, event))
	if len(h.groups) == 0 {
		r.Attrs(func(a slog.Attr) bool {
			out.AddAttrs(a)
			return true
		})
	} else {
		attrs := make([]slog.Attr, 0, r.NumAttrs())
		r.Attrs(func(a slog.Attr) bool {
			attrs = append(attrs, a)
			return true
		})
		out.AddAttrs(h.nest(attrs)...)
	}
	return h.inner.Handle(ctx, out)
}

// nest puts a record's attributes inside the open groups, each group
// holding the attributes given to it before them.
func (h *handler) nest(attrs []slog.Attr) []slog.Attr {
	for i := len(h.groups) - 1; i >= 0; i-- {
		g := h.groups[i]
		inside := append(slices.Clip(g.attrs), attrs...)
		if len(inside) == 0 {
			continue // an empty group is left out, as slog's handlers do
		}
		attrs = []slog.Attr{{Key: g.name, Value: slog.GroupValue(inside...)}}
	}
	return attrs
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	if len(h.groups) == 0 {
		return &handler{inner: h.inner.WithAttrs(attrs), lang: h.lang}
	}
	groups := slices.Clone(h.groups)
	last := &groups[len(groups)-1]
	last.attrs = append(slices.Clip(last.attrs), attrs...)
	return &handler{inner: h.inner, lang: h.lang, groups: groups}
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	groups := append(slices.Clip(h.groups), group{name: name})
	return &handler{inner: h.inner, lang: h.lang, groups: groups}
}
