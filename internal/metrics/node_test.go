package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/httpapi"
	"github.com/malachi-log/malachi/internal/metrics"
	"github.com/malachi-log/malachi/internal/server"
	"github.com/malachi-log/malachi/pkg/client"
)

// node is a real node in process: broker, client server and HTTP side on
// loopback ports, with the development users.
type node struct {
	b       *broker.Broker
	m       *metrics.Metrics
	client  string // client protocol address
	httpURL string // http://host:port
}

func startNode(t *testing.T, opts metrics.Options) *node {
	t.Helper()
	return startNodeWith(t, opts, nil)
}

// startNodeWith starts a node whose /metrics checks credentials with
// access(b), or serves them to anyone when access is nil.
func startNodeWith(t *testing.T, opts metrics.Options, access func(*broker.Broker) metrics.Access) *node {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := broker.Open(ctx, broker.Config{DataDir: t.TempDir(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.SeedUsers(ctx, true, ""); err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{Addr: "127.0.0.1:0", Logger: logger}, b)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	if access != nil {
		opts.Access = access(b)
	}
	m := metrics.New(b, srv, opts)
	t.Cleanup(m.Close)
	web := httpapi.New("127.0.0.1:0", b, false, httpapi.WithMetrics(m.Handler()))
	if err := web.Listen(); err != nil {
		t.Fatal(err)
	}
	go web.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		web.Shutdown(ctx)
	})
	return &node{b: b, m: m, client: srv.Addr().String(), httpURL: "http://" + web.Addr().String()}
}

func (n *node) dial(t *testing.T) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, n.client, client.WithCredentials("admin", "admin123"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// produce sends count records to topic in requests of at most 10.
func produce(t *testing.T, c *client.Client, topic string, count int) {
	t.Helper()
	for sent := 0; sent < count; {
		n := min(10, count-sent)
		recs := make([]client.Record, n)
		for i := range recs {
			recs[i] = client.Record{Key: fmt.Appendf(nil, "k%d", (sent+i)%7), Value: fmt.Appendf(nil, "value %d", sent+i)}
		}
		got, err := c.Produce(t.Context(), topic, recs...)
		if err != nil || got != n {
			t.Fatalf("produce: %d of %d, %v", got, n, err)
		}
		sent += n
	}
}

// consume reads count records as group from its committed position and
// commits after them.
func consume(t *testing.T, c *client.Client, topic, group string, count int) {
	t.Helper()
	got, cur := 0, ""
	deadline := time.Now().Add(30 * time.Second)
	for got < count {
		if time.Now().After(deadline) {
			t.Fatalf("read %d of %d records", got, count)
		}
		page, err := c.Fetch(t.Context(), topic, client.FetchOptions{Group: group, Cursor: cur, Max: count - got, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got += len(page.Records)
		cur = page.Cursor
	}
	if got != count {
		t.Fatalf("read %d records, want %d", got, count)
	}
	if err := c.Commit(t.Context(), topic, client.CommitOptions{Group: group, Cursor: cur}); err != nil {
		t.Fatal(err)
	}
}

// gathered reads one series of the node's registry; ok is false when it
// is absent.
func gathered(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, mt := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range mt.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metric
				}
			}
			switch {
			case mt.Counter != nil:
				return mt.Counter.GetValue(), true
			case mt.Gauge != nil:
				return mt.Gauge.GetValue(), true
			case mt.Histogram != nil:
				return float64(mt.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// waitGathered waits until the series is present with a value pred
// accepts: the lag series follow their computation's period.
func waitGathered(t *testing.T, m *metrics.Metrics, name string, labels map[string]string, want string, pred func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		v, ok := gathered(t, m, name, labels)
		if ok && pred(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v (present %v), want %s", name, labels, v, ok, want)
		}
		<-tick.C
	}
}

func TestNodeCountsWhatClientsSendAndRead(t *testing.T) {
	n := startNode(t, metrics.Options{CacheFor: time.Nanosecond, LagEvery: 5 * time.Millisecond})
	c := n.dial(t)
	if err := c.CreateTopic(t.Context(), "orders"); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "orders", 25)
	if v, _ := gathered(t, n.m, "malachi_records_produced_total", nil); v != 25 {
		t.Errorf("records produced = %v, want 25", v)
	}
	if v, _ := gathered(t, n.m, "malachi_produce_requests_total", map[string]string{"result": "ok"}); v != 3 {
		t.Errorf("produce requests ok = %v, want 3", v)
	}
	if v, _ := gathered(t, n.m, "malachi_produce_latency_seconds", nil); v != 3 {
		t.Errorf("produce latency observations = %v, want 3 (one per request)", v)
	}
	if v, _ := gathered(t, n.m, "malachi_storage_fsync_latency_seconds", nil); v == 0 {
		t.Error("no fsync observed after durable produces")
	}
	if v, _ := gathered(t, n.m, "malachi_topic_records", map[string]string{"topic": "orders"}); v != 25 {
		t.Errorf("topic records = %v, want 25", v)
	}

	consume(t, c, "orders", "billing", 10)
	billing := map[string]string{"topic": "orders", "group": "billing"}
	waitGathered(t, n.m, "malachi_consumer_group_lag_records", billing, "15 after reading 10 of 25", func(v float64) bool { return v == 15 })
	waitGathered(t, n.m, "malachi_consumer_group_lag_seconds", billing, "> 0 with 15 records unread", func(v float64) bool { return v > 0 })
	consume(t, c, "orders", "billing", 15)
	if v, _ := gathered(t, n.m, "malachi_records_consumed_total", nil); v != 25 {
		t.Errorf("records consumed = %v, want 25", v)
	}
	// The reads went into pooled buffers, carved from mapped regions that
	// stay mapped (one per size is kept for the next burst).
	if v, ok := gathered(t, n.m, "malachi_storage_read_pool_mapped_bytes", nil); !ok || v == 0 {
		t.Errorf("read pool mapped = %v (present %v) after consuming, want > 0", v, ok)
	}
	if _, ok := gathered(t, n.m, "malachi_storage_read_pool_free_bytes", nil); !ok {
		t.Error("no read pool free bytes series")
	}
	waitGathered(t, n.m, "malachi_consumer_group_lag_records", billing, "0 after reading everything", func(v float64) bool { return v == 0 })
	waitGathered(t, n.m, "malachi_consumer_group_lag_seconds", billing, "0 after reading everything", func(v float64) bool { return v == 0 })
	if _, ok := gathered(t, n.m, "malachi_raft_proposals_total", nil); ok {
		t.Error("a single node reports raft series")
	}
}

func TestMetricsEndpointNegotiatesTheFormat(t *testing.T) {
	n := startNode(t, metrics.Options{})
	for accept, want := range map[string]string{
		"": "text/plain; version=0.0.4",
		"application/openmetrics-text; version=1.0.0": "application/openmetrics-text",
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, n.httpURL+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), want) {
			t.Errorf("Accept %q: %d %q, want 200 %q", accept, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
		for _, series := range []string{"malachi_up 1", "go_goroutines", "process_cpu_seconds_total", "malachi_storage_fsync_latency_seconds_bucket"} {
			if !strings.Contains(string(body), series) {
				t.Errorf("Accept %q: %s missing from the page", accept, series)
			}
		}
		if accept != "" && !strings.HasSuffix(strings.TrimSpace(string(body)), "# EOF") {
			t.Errorf("OpenMetrics page does not end with # EOF")
		}
	}
	// /health is still the node's.
	resp, err := http.Get(n.httpURL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health answered %d", resp.StatusCode)
	}
}

func TestNodeCountsRefusedLoginsAndExpiredRecords(t *testing.T) {
	n := startNode(t, metrics.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := client.Dial(ctx, n.client, client.WithCredentials("admin", "wrong-password"), client.WithRetry(1, time.Millisecond)); err == nil {
		t.Fatal("a wrong password logged in")
	}
	if v, _ := gathered(t, n.m, "malachi_failed_auth_total", nil); v != 1 {
		t.Errorf("failed logins = %v, want 1", v)
	}
	if v, _ := gathered(t, n.m, "malachi_auth_attempts_total", map[string]string{"result": "invalid_credentials"}); v != 1 {
		t.Errorf("auth attempts invalid_credentials = %v, want 1", v)
	}

	c := n.dial(t)
	if err := c.CreateTopic(ctx, "short"); err != nil {
		t.Fatal(err)
	}
	recs := []client.Record{
		client.NewRecord([]byte("a"), []byte("1"), client.WithTTL(time.Millisecond)),
		client.NewRecord([]byte("b"), []byte("2"), client.WithTTL(time.Millisecond)),
		client.NewRecord([]byte("c"), []byte("3"), client.WithTTL(time.Millisecond)),
	}
	if _, err := c.Produce(ctx, "short", recs...); err != nil {
		t.Fatal(err)
	}
	// Once every record has expired, one read passes over all three; a
	// read still served some of them is tried again.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		before, _ := gathered(t, n.m, "malachi_ttl_filtered_records_total", nil)
		page, err := c.Fetch(ctx, "short", client.FetchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		after, _ := gathered(t, n.m, "malachi_ttl_filtered_records_total", nil)
		if len(page.Records) == 0 {
			if after-before != 3 {
				t.Errorf("a read past 3 expired records counted %v filtered", after-before)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the records never expired")
		}
	}
	if v, _ := gathered(t, n.m, "malachi_retention_skipped_records_told_total", nil); v != 0 {
		t.Errorf("expired records counted as skips: %v", v)
	}
}
