package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/malachi-log/malachi/pkg/client"
)

// recordFormat writes one consumed record to w. cursor is where reading
// resumes after r; the consumer knows it only for the last record of a
// page, and passes "" for the others.
type recordFormat func(w *bufio.Writer, r *client.Record, cursor string) error

// textOptions add kcat-style fields to the default value-per-line output.
type textOptions struct {
	keys, headers bool
}

// templateFields documents what a --format template sees.
const templateFields = `.Key (string), .Value (string), .Headers (map of name to value, e.g.
{{.Headers.source}}), .Timestamp (a Go time.Time: {{.Timestamp.UnixMilli}},
{{.Timestamp.Format "2006-01-02"}}) and .Cursor (where reading resumes
after the record; set on the last record of each page read, else empty)`

// newRecordFormat returns the format --format names: the value alone per
// line (the default, so produce | consume round-trips lines), JSON lines,
// or a Go template. Any other word is a usage error, not a template that
// prints itself for every record.
func newRecordFormat(spec string, jsonOut bool, opt textOptions) (recordFormat, error) {
	switch {
	case spec == "json", spec == "" && jsonOut:
		return writeJSONRecord, nil
	case spec == "" || spec == "value":
		if opt.keys || opt.headers {
			return opt.write, nil
		}
		return writeValue, nil
	case !strings.Contains(spec, "{{"):
		return nil, usageErr("--format is value, json or a Go template such as '{{.Key}}\\t{{.Value}}', not %q", spec)
	}
	tmpl, err := template.New("format").Option("missingkey=zero").Parse(unescape(spec))
	if err != nil {
		return nil, usageErr("--format: %s", templateError(err))
	}
	// Run the template once on a sample so that a wrong field is a usage
	// error before anything is read, not a failure at the first record.
	sample := client.Record{Key: []byte{}, Value: []byte{}, Timestamp: time.Unix(0, 0)}
	if err := tmpl.Execute(io.Discard, newTemplateRecord(&sample, "")); err != nil {
		return nil, usageErr("--format: %s", templateError(err))
	}
	var buf bytes.Buffer
	return func(w *bufio.Writer, r *client.Record, cursor string) error {
		buf.Reset()
		if err := tmpl.Execute(&buf, newTemplateRecord(r, cursor)); err != nil {
			return usageErr("--format: %s", templateError(err))
		}
		// One record per line unless the template ends lines itself.
		if !bytes.HasSuffix(buf.Bytes(), []byte{'\n'}) {
			buf.WriteByte('\n')
		}
		_, err := w.Write(buf.Bytes())
		return err
	}, nil
}

var unknownField = regexp.MustCompile(`can't evaluate field (\w+)`)

// templateError says what is wrong with a template in the user's terms:
// text/template names Go types, which mean nothing to someone who typed
// {{.Vlaue}}.
func templateError(err error) string {
	msg := err.Error()
	if m := unknownField.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("no field %s; the fields are %s", m[1], strings.Join(strings.Fields(templateFields), " "))
	}
	msg = strings.TrimPrefix(msg, "template: ")
	msg = strings.TrimPrefix(msg, "format:")
	return strings.NewReplacer("main.templateRecord", "record", "client.", "", "main.", "").Replace(msg)
}

// unescape turns \t, \n and \\ typed on a shell command line into the
// characters they name, as printf does.
var unescape = strings.NewReplacer(`\\`, `\`, `\t`, "\t", `\n`, "\n", `\0`, "\x00").Replace

func writeValue(w *bufio.Writer, r *client.Record, _ string) error {
	w.Write(r.Value)
	return w.WriteByte('\n')
}

// write prints "key<TAB>headers<TAB>value": the key (empty for none), the
// headers as name=value joined by commas, then the value, each field only
// when asked for.
func (o textOptions) write(w *bufio.Writer, r *client.Record, _ string) error {
	if o.keys {
		w.Write(r.Key)
		w.WriteByte('\t')
	}
	if o.headers {
		for i, h := range r.Headers {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString(h.Key)
			w.WriteByte('=')
			w.Write(h.Value)
		}
		w.WriteByte('\t')
	}
	return writeValue(w, r, "")
}

// templateRecord is what a --format template sees.
type templateRecord struct {
	Key       string
	Value     string
	Headers   map[string]string
	Timestamp time.Time
	Cursor    string
}

func newTemplateRecord(r *client.Record, cursor string) templateRecord {
	t := templateRecord{Key: string(r.Key), Value: string(r.Value), Timestamp: r.Timestamp, Headers: map[string]string{}, Cursor: cursor}
	for _, h := range r.Headers {
		t.Headers[h.Key] = string(h.Value)
	}
	return t
}

// jsonRecord is one line of --format json. Keys, values, header keys and
// header values are strings when they are valid UTF-8, else base64 with
// the matching *_base64 flag set. A record without a key has "key": null.
type jsonRecord struct {
	Key         *string      `json:"key"`
	KeyBase64   bool         `json:"key_base64,omitempty"`
	Value       string       `json:"value"`
	ValueBase64 bool         `json:"value_base64,omitempty"`
	Headers     []jsonHeader `json:"headers,omitempty"`
	Timestamp   string       `json:"timestamp,omitempty"`
	// Range is the range the record was read from, when the wire says
	// (v2); produce ignores it.
	Range uint64 `json:"range,omitempty"`
	// Cursor resumes reading after this record; consume sets it on the
	// last record of each page it read, produce ignores it.
	Cursor string `json:"cursor,omitempty"`
}

type jsonHeader struct {
	Key         string  `json:"key"`
	KeyBase64   bool    `json:"key_base64,omitempty"`
	Value       *string `json:"value"`
	ValueBase64 bool    `json:"value_base64,omitempty"`
}

func writeJSONRecord(w *bufio.Writer, r *client.Record, cursor string) error {
	j := jsonRecord{Timestamp: jsonTime(r.Timestamp), Range: r.Range, Cursor: cursor}
	if r.Key != nil {
		var k string
		k, j.KeyBase64 = textOrBase64(r.Key)
		j.Key = &k
	}
	j.Value, j.ValueBase64 = textOrBase64(r.Value)
	for _, h := range r.Headers {
		j.Headers = append(j.Headers, jsonHeaderOf([]byte(h.Key), h.Value))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(j); err != nil { // Encode ends the line
		return err
	}
	// Keys and values are data, but a JSON line is text for a terminal or
	// a log viewer: escape what encoding/json leaves raw, as for -o json.
	_, err := w.Write(safeJSON(buf.Bytes()))
	return err
}

// textOrBase64 returns b as a string if it is valid UTF-8, else its
// base64 and true.
func textOrBase64(b []byte) (string, bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	return base64.StdEncoding.EncodeToString(b), true
}

// jsonHeader of a record header: key and value as text where they are
// valid UTF-8, else base64; a nil value stays null.
func jsonHeaderOf(key, value []byte) jsonHeader {
	var jh jsonHeader
	jh.Key, jh.KeyBase64 = textOrBase64(key)
	if value != nil {
		var v string
		v, jh.ValueBase64 = textOrBase64(value)
		jh.Value = &v
	}
	return jh
}
