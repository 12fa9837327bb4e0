package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/malachi-log/malachi/pkg/client"
)

// maxLine bounds one input line: the server's default frame limit, so a
// longer line could never be sent anyway.
const maxLine = 16 << 20

// parsedLine is one input line made into a record, or why it could not be.
type parsedLine struct {
	rec client.Record
	err error
}

// lineParser makes line number n into a record. line is only valid during
// the call: the record must not alias it.
type lineParser func(line []byte, n int) (client.Record, error)

// newLineParser returns the parser for the key flags: a fixed key, a key
// at a JSON path, key<TAB>value lines, or no key.
func newLineParser(key string, path []string, kv bool, headers []client.Header) lineParser {
	var fixed []byte
	if key != "" {
		fixed = []byte(key)
	}
	return func(line []byte, n int) (client.Record, error) {
		rec := client.Record{Key: fixed, Value: bytes.Clone(line), Headers: headers}
		if rec.Value == nil {
			rec.Value = []byte{}
		}
		switch {
		case kv:
			k, v, ok := bytes.Cut(rec.Value, []byte{'\t'})
			if !ok {
				return rec, fmt.Errorf("line %d: no TAB between key and value (--kv)", n)
			}
			rec.Key, rec.Value = k, v
		case path != nil:
			k, err := keyAt(line, path)
			if err != nil {
				return rec, fmt.Errorf("line %d: %w", n, err)
			}
			rec.Key = k
		}
		return rec, nil
	}
}

// readLines sends every line of in, parsed, to out and closes out. It
// stops after the first bad line or when done closes. Lines keep a final
// carriage return: values round-trip byte for byte.
func readLines(in io.Reader, parse lineParser, out chan<- parsedLine, done <-chan struct{}) {
	defer close(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	sc.Split(splitLines)
	n := 0
	for sc.Scan() {
		n++
		rec, err := parse(sc.Bytes(), n)
		if !send(out, done, parsedLine{rec: rec, err: err}) || err != nil {
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
