package main

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// safeText makes s safe to print on a terminal. Names come from the
// server (users, groups, topics, node ids, error reasons), and a hostile
// or compromised server could otherwise embed escape sequences that
// recolour, move the cursor, rewrite earlier lines or set the window
// title. Every C0 control, DEL, C1 control, Unicode bidi or line
// separator control and byte that is not UTF-8 is replaced by a visible
// escape: \t, \n and \r by name, other bytes below 0x80 and invalid bytes
// as \xNN, and runes as \uNNNN. Everything else, including backslashes,
// is left as it is, so ordinary names print unchanged.
//
// Every text the CLI prints that did not come from its own source code
// goes through it; record values printed by consume are the exception,
// because reproducing their bytes exactly is the point of consume.
func safeText(s string) string {
	i := unsafeAt(s)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case isControlRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// unsafeAt returns the index of the first byte safeText must escape, or
// -1: most names need no copy at all.
func unsafeAt(s string) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || isControlRune(r) {
			return i
		}
		i += n
	}
	return -1
}

// isControlRune reports the runes above ASCII that act on a terminal or
// on the text around them: C1 controls (U+0080–U+009F; U+009B is CSI,
// which some terminals honour like ESC [), bidi controls, and the line
// and paragraph separators.
func isControlRune(r rune) bool {
	return r >= 0x80 && r <= 0x9f || r == 0x2028 || r == 0x2029 || isBidiControl(r)
}

// isBidiControl reports the invisible marks that reorder the text around
// them, which can make a printed name read as something else.
func isBidiControl(r rune) bool {
	switch {
	case r == 0x061c, r == 0x200e, r == 0x200f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// safeArgs applies safeText to the strings, errors and Stringers among
// printf arguments; numbers and the like pass as they are.
func safeArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = safeText(v)
		case error:
			out[i] = safeText(v.Error())
		case fmt.Stringer:
			out[i] = safeText(v.String())
		default:
			out[i] = a
		}
	}
	return out
}

// safeJSON escapes, inside an encoded JSON document, the characters
// encoding/json leaves raw although a terminal would act on them: DEL, the
// C1 controls and the bidi and separator controls. Outside strings JSON
// holds only ASCII structure, so every such character is inside a string,
// where \uNNNN denotes the same character: the document decodes to the
// same values. (encoding/json already escapes the C0 controls and
// replaces bytes that are not UTF-8.)
func safeJSON(doc []byte) []byte {
	clean := true
	for i := 0; i < len(doc) && clean; {
		if doc[i] < utf8.RuneSelf {
			clean = doc[i] != 0x7f
			i++
			continue
		}
		r, n := utf8.DecodeRune(doc[i:])
		clean = !isControlRune(r)
		i += n
	}
	if clean {
		return doc
	}
	var b bytes.Buffer
	b.Grow(len(doc) + 16)
	for i := 0; i < len(doc); {
		r, n := utf8.DecodeRune(doc[i:])
		if r == 0x7f || isControlRune(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.Write(doc[i : i+n])
		}
		i += n
	}
	return b.Bytes()
}
