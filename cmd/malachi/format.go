package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/malachi-log/malachi/pkg/client"
)

// recordFormat writes one consumed record to w.
type recordFormat func(w *bufio.Writer, r *client.Record) error

// newRecordFormat returns the format --format names: the value alone per
// line (the default, so produce | consume round-trips lines), JSON lines,
// or a Go template.
func newRecordFormat(spec string, jsonOut bool) (recordFormat, error) {
	switch {
	case spec == "json", spec == "" && jsonOut:
		return writeJSONRecord, nil
	case spec == "" || spec == "value":
		return writeValue, nil
	}
	tmpl, err := template.New("format").Option("missingkey=zero").Parse(unescape(spec))
	if err != nil {
		return nil, usageErr("--format: %v", err)
	}
	var buf bytes.Buffer
	return func(w *bufio.Writer, r *client.Record) error {
		buf.Reset()
		if err := tmpl.Execute(&buf, newTemplateRecord(r)); err != nil {
			return usageErr("--format: %v", err)
		}
		// One record per line unless the template ends lines itself.
		if !bytes.HasSuffix(buf.Bytes(), []byte{'\n'}) {
			buf.WriteByte('\n')
		}
		_, err := w.Write(buf.Bytes())
		return err
	}, nil
}

// unescape turns \t, \n and \\ typed on a shell command line into the
// characters they name, as printf does.
var unescape = strings.NewReplacer(`\\`, `\`, `\t`, "\t", `\n`, "\n").Replace

func writeValue(w *bufio.Writer, r *client.Record) error {
	w.Write(r.Value)
	return w.WriteByte('\n')
}

// templateRecord is what a --format template sees.
type templateRecord struct {
	Key       string
	Value     string
	Headers   map[string]string
	Timestamp time.Time
}

func newTemplateRecord(r *client.Record) templateRecord {
	t := templateRecord{Key: string(r.Key), Value: string(r.Value), Timestamp: r.Timestamp, Headers: map[string]string{}}
	for _, h := range r.Headers {
		t.Headers[h.Key] = string(h.Value)
	}
	return t
}

// jsonRecord is one line of --format json. Keys, values and header values
// are strings when they are valid UTF-8, else base64 with the matching
// *_base64 flag set. A record without a key has "key": null.
type jsonRecord struct {
	Key         *string      `json:"key"`
	KeyBase64   bool         `json:"key_base64,omitempty"`
	Value       string       `json:"value"`
	ValueBase64 bool         `json:"value_base64,omitempty"`
	Headers     []jsonHeader `json:"headers,omitempty"`
	Timestamp   string       `json:"timestamp,omitempty"`
}

type jsonHeader struct {
	Key         string  `json:"key"`
	Value       *string `json:"value"`
	ValueBase64 bool    `json:"value_base64,omitempty"`
}

func writeJSONRecord(w *bufio.Writer, r *client.Record) error {
	j := jsonRecord{Timestamp: jsonTime(r.Timestamp)}
	if r.Key != nil {
		var k string
		k, j.KeyBase64 = textOrBase64(r.Key)
		j.Key = &k
	}
	j.Value, j.ValueBase64 = textOrBase64(r.Value)
	for _, h := range r.Headers {
		jh := jsonHeader{Key: h.Key}
		if h.Value != nil {
			var v string
			v, jh.ValueBase64 = textOrBase64(h.Value)
			jh.Value = &v
		}
		j.Headers = append(j.Headers, jh)
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
