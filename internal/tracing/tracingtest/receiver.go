// Package tracingtest is an OTLP/HTTP trace receiver for tests: it
// decodes what exporters post (protobuf, gzip or not) and keeps the
// spans, so a test can check the traces a cluster produced.
package tracingtest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Bounds: a request body, and the spans kept (beyond them the receiver
// answers 507 and keeps nothing more, which fails the test that needed
// them rather than growing without bound).
const (
	maxBody  = 16 << 20
	maxSpans = 100_000
)

// Span is a received span, ids in hex.
type Span struct {
	Node     string // the resource's malachi.node
	Name     string
	TraceID  string
	SpanID   string
	ParentID string // empty for a root
	Kind     string
	Attrs    map[string]string
	Links    []string // span ids of the linked spans
	Error    bool     // its status is an error
	Events   []string // names of its events
}

// Receiver is an OTLP/HTTP endpoint on loopback.
type Receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	got   []Span
	stall chan struct{} // when set, requests wait for it to close
}

// NewReceiver starts a receiver, closed when t ends.
func NewReceiver(t testing.TB) *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// Endpoint is the URL exporters post to.
func (r *Receiver) Endpoint() string { return r.srv.URL + "/v1/traces" }

// Stall makes every request wait until t ends, as a collector that
// takes connections and never answers.
func (r *Receiver) Stall(t testing.TB) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.stall = ch
	r.mu.Unlock()
	t.Cleanup(func() { close(ch) })
}

// Spans returns a copy of the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.got...)
}

// Reset forgets the spans received so far.
func (r *Receiver) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = nil
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	stall := r.stall
	r.mu.Unlock()
	if stall != nil {
		<-stall
		http.Error(w, "stalled", http.StatusServiceUnavailable)
		return
	}
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "POST /v1/traces only", http.StatusNotFound)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, maxBody)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = io.LimitReader(zr, maxBody)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg collector.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, fmt.Sprintf("not an ExportTraceServiceRequest: %v", err), http.StatusBadRequest)
		return
	}
	if !r.keep(decode(&msg)) {
		http.Error(w, "receiver full", http.StatusInsufficientStorage)
		return
	}
	out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (r *Receiver) keep(spans []Span) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got)+len(spans) > maxSpans {
		return false
	}
	r.got = append(r.got, spans...)
	return true
}

func decode(msg *collector.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range msg.GetResourceSpans() {
		node := attrs(rs.GetResource().GetAttributes())["malachi.node"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Node: node, Name: s.GetName(), Kind: s.GetKind().String(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Attrs: attrs(s.GetAttributes()),
					Error: s.GetStatus().GetCode().String() == "STATUS_CODE_ERROR",
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, e.GetName())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetSpanId()))
				}
				out = append(out, sp)
			}
		}
	}
	return out
}

func attrs(kvs []*common.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *common.AnyValue_StringValue:
			m[kv.GetKey()] = v.GetStringValue()
		case *common.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
		case *common.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetBoolValue())
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}
