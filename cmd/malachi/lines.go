package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// maxLine bounds one input line: the server's default frame limit, so a
// longer line could never be sent anyway.
const maxLine = 16 << 20

// parsedLine is one input line made into a record, or why it could not be.
// n is the line's number, 0 for a failure to read the input itself.
type parsedLine struct {
	rec client.Record
	err error
	n   int
}

// lineParser makes line number n into a record. line is only valid during
// the call: the record must not alias it.
type lineParser func(line []byte, n int) (client.Record, error)

// lineFormat is how produce reads its input: what separates records,
// and how each becomes one.
type lineFormat struct {
	key       string
	path      []string // --key-from
	kv        bool
	kvHeaders bool // --kv lines carry name=value headers after the value
	json      bool // --format json: the lines of 'consume --format json'
	headers   []client.Header
	delimiter []byte // nil: newline
	whole     bool   // the whole input is one value (--value-file)
}

// newLineParser returns the parser for the key flags: a fixed key, a key
// at a JSON path, key<TAB>value lines, JSON records, or no key.
func newLineParser(lf lineFormat) lineParser {
	var fixed []byte
	if lf.key != "" {
		fixed = []byte(lf.key)
	}
	return func(line []byte, n int) (client.Record, error) {
		if lf.json {
			rec, err := parseJSONRecord(line)
			if err != nil {
				return rec, fmt.Errorf("line %d: %w", n, err)
			}
			rec.Headers = append(rec.Headers, lf.headers...)
			return rec, nil
		}
		rec := client.Record{Key: fixed, Value: bytes.Clone(line), Headers: lf.headers}
		if rec.Value == nil {
			rec.Value = []byte{}
		}
		switch {
		case lf.kv:
			k, v, ok := bytes.Cut(rec.Value, []byte{'\t'})
			if !ok {
				return rec, fmt.Errorf("line %d: no TAB between key and value (--kv)", n)
			}
			rec.Key, rec.Value = k, v
			if lf.kvHeaders {
				fields := bytes.Split(v, []byte{'\t'})
				rec.Value = fields[0]
				rec.Headers = slices.Clone(lf.headers)
				for _, f := range fields[1:] {
					name, val, ok := bytes.Cut(f, []byte{'='})
					if !ok || len(name) == 0 {
						return rec, fmt.Errorf("line %d: header %q is not name=value (--kv-headers)", n, f)
					}
					rec.Headers = append(rec.Headers, client.Header{Key: string(name), Value: val})
				}
			}
		case lf.path != nil:
			k, err := keyAt(line, lf.path)
			if err != nil {
				return rec, fmt.Errorf("line %d: %w", n, err)
			}
			rec.Key = k
		}
		return rec, nil
	}
}

// jsonLine is a line produce --format json reads: a jsonRecord whose
// timestamp is RFC 3339 or, for one RFC 3339 cannot write (past year
// 9999, before year 0), unix milliseconds as a number.
type jsonLine struct {
	jsonRecord
	Timestamp json.RawMessage `json:"timestamp"`
}

// parseJSONRecord reads one line of 'consume --format json' or 'segment
// inspect --records --format json'.
func parseJSONRecord(line []byte) (client.Record, error) {
	var jl jsonLine
	if err := json.Unmarshal(line, &jl); err != nil {
		return client.Record{}, fmt.Errorf("not a JSON record (--format json reads the lines of 'consume --format json'): %v", err)
	}
	j := &jl.jsonRecord
	var rec client.Record
	var err error
	if j.Key != nil {
		if rec.Key, err = fromTextOrBase64(*j.Key, j.KeyBase64); err != nil {
			return rec, fmt.Errorf("key: %v", err)
		}
	}
	if rec.Value, err = fromTextOrBase64(j.Value, j.ValueBase64); err != nil {
		return rec, fmt.Errorf("value: %v", err)
	}
	for _, h := range j.Headers {
		k, err := fromTextOrBase64(h.Key, h.KeyBase64)
		if err != nil {
			return rec, fmt.Errorf("header key %s: %v", h.Key, err)
		}
		hd := client.Header{Key: string(k)}
		if h.Value != nil {
			if hd.Value, err = fromTextOrBase64(*h.Value, h.ValueBase64); err != nil {
				return rec, fmt.Errorf("header %s: %v", h.Key, err)
			}
		}
		rec.Headers = append(rec.Headers, hd)
	}
	if rec.Timestamp, err = parseJSONTimestamp(jl.Timestamp); err != nil {
		return rec, fmt.Errorf("timestamp: %v", err)
	}
	return rec, nil
}

// parseJSONTimestamp reads a record's "timestamp": RFC 3339, or unix
// milliseconds as a JSON number; absent, null or "" is the zero time.
func parseJSONTimestamp(raw json.RawMessage) (time.Time, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || s == "" {
			return time.Time{}, err
		}
		return time.Parse(time.RFC3339Nano, s)
	}
	ms, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s is neither an RFC 3339 time nor whole unix milliseconds", raw)
	}
	return time.UnixMilli(ms), nil
}

func fromTextOrBase64(s string, b64 bool) ([]byte, error) {
	if b64 {
		return base64.StdEncoding.DecodeString(s)
	}
	return []byte(s), nil
}

// readLines sends every record of in, parsed, to out and closes out. A
// bad line is sent with its error, and reading goes on only if skipBad.
// It stops when done closes. Lines keep a final carriage return: values
// round-trip byte for byte.
func readLines(in io.Reader, lf lineFormat, parse lineParser, skipBad bool, out chan<- parsedLine, done <-chan struct{}) {
	defer close(out)
	if lf.whole {
		b, err := io.ReadAll(io.LimitReader(in, maxLine+1))
		switch {
		case err != nil:
		case len(b) > maxLine:
			err = fmt.Errorf("the file is longer than %d MiB, the largest request a server takes", maxLine>>20)
		default:
			rec, perr := parse(b, 1)
			send(out, done, parsedLine{rec: rec, err: perr, n: 1})
			return
		}
		send(out, done, parsedLine{err: err})
		return
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	sc.Split(splitLines)
	if lf.delimiter != nil {
		sc.Split(splitOn(lf.delimiter))
	}
	n := 0
	for sc.Scan() {
		n++
		rec, err := parse(sc.Bytes(), n)
		if !send(out, done, parsedLine{rec: rec, err: err, n: n}) || err != nil && !skipBad {
			return
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line %d is longer than %d MiB, the largest request a server takes", n+1, maxLine>>20)
		}
		send(out, done, parsedLine{err: err})
	}
}

// splitOn splits at each delimiter; the delimiter is not part of the
// record, and a final record needs none.
func splitOn(delim []byte) bufio.SplitFunc {
	return func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.Index(data, delim); i >= 0 {
			return i + len(delim), data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	}
}

func send(out chan<- parsedLine, done <-chan struct{}, l parsedLine) bool {
	select {
	case out <- l:
		return true
	case <-done:
		return false
	}
}

// splitLines is bufio.ScanLines without dropping a trailing \r.
func splitLines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// parseKeyPath splits a dot path: ".user.id" (the leading dot is
// optional) is ["user", "id"]. Array elements are addressed by index,
// ".items.0.sku".
func parseKeyPath(p string) ([]string, error) {
	parts := strings.Split(strings.TrimPrefix(p, "."), ".")
	for _, part := range parts {
		if part == "" {
			return nil, fmt.Errorf("%q is not a dot path like .id or .user.id", p)
		}
	}
	return parts, nil
}

// keyAt returns the value at path in the JSON document line: a string as
// it is, a number as written, anything else as compact JSON.
func keyAt(line []byte, path []string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber() // keep 10000000000000001 exact
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON (--key-from needs one JSON document per line): %v", err)
	}
	where := "." + strings.Join(path, ".")
	for _, part := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[part]
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(x) {
				return nil, fmt.Errorf("no key at %s", where)
			}
			v = x[i]
		default:
			return nil, fmt.Errorf("no key at %s", where)
		}
	}
	switch x := v.(type) {
	case nil:
		return nil, fmt.Errorf("no key at %s", where)
	case string:
		return []byte(x), nil
	case json.Number:
		return []byte(x), nil
	default:
		return json.Marshal(x)
	}
}

// parseHeaders parses repeated --header k=v flags.
func parseHeaders(kvs []string) ([]client.Header, error) {
	var hs []client.Header
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErr("--header takes key=value, not %q", kv)
		}
		hs = append(hs, client.Header{Key: k, Value: []byte(v)})
	}
	return hs, nil
}
