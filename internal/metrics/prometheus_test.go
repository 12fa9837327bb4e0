package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metrics"
	"github.com/malachi-log/malachi/internal/testenv"
)

// promServer is a real Prometheus server scraping one node.
type promServer struct {
	url string
	out *lockedBuffer
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 { // keep the test's memory bounded
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startPrometheus runs prometheus with a temporary configuration and
// storage, scraping target's /metrics every second as user (HTTP Basic,
// the password in a file), and kills it when the test ends.
func startPrometheus(t *testing.T, target, user, password string) *promServer {
	t.Helper()
	bin := testenv.Program(t, "prometheus", "prometheus")
	dir := t.TempDir()
	passPath := filepath.Join(dir, "password")
	if err := os.WriteFile(passPath, []byte(password), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: malachi
    basic_auth:
      username: %q
      password_file: %q
    static_configs:
      - targets: [%q]
`, user, passPath, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	out := &lockedBuffer{}
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	p := &promServer{url: "http://" + addr, out: out}
	waitFor(t, 60*time.Second, "prometheus to answer", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("prometheus exited: %s", out.String())
		default:
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return p
}

// freePort returns a loopback address no one listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(testenv.FreePorts(t, 1)[0])
}

// query evaluates an instant PromQL query and returns the first sample's
// value; ok is false when the result is empty.
func (p *promServer) query(ctx context.Context, q string) (v float64, ok bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, false, err
	}
	if body.Status != "success" {
		return 0, false, fmt.Errorf("query %q: %s", q, body.Error)
	}
	if len(body.Data.Result) == 0 {
		return 0, false, nil
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	v, err = strconv.ParseFloat(s, 64)
	return v, true, err
}

// waitFor polls cond until it holds or timeout passes; cond's detail is
// reported on failure.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	detail := ""
	for {
		var ok bool
		if ok, detail = cond(); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: %s", timeout, what, detail)
		}
		<-tick.C
	}
}

// waitValue waits until Prometheus answers q with a value pred accepts.
func (p *promServer) waitValue(t *testing.T, q string, want string, pred func(float64) bool) float64 {
	t.Helper()
	var got float64
	waitFor(t, 60*time.Second, fmt.Sprintf("%s %s", q, want), func() (bool, string) {
		v, ok, err := p.query(t.Context(), q)
		switch {
		case err != nil:
			return false, err.Error()
		case !ok:
			return false, "no sample yet"
		}
		got = v
		return pred(v), fmt.Sprintf("last value %v", v)
	})
	return got
}

func equals(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// TestPrometheusScrapesTheNode runs the real Prometheus server against a
// node and watches the series move as records are produced and consumed.
func TestPrometheusScrapesTheNode(t *testing.T) {
	n := startNodeWith(t, metrics.Options{CacheFor: 200 * time.Millisecond, LagEvery: 200 * time.Millisecond},
		func(b *broker.Broker) metrics.Access { return b })
	if resp, _ := get(t, n, "/metrics", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a scrape without credentials: %d, want 401", resp.StatusCode)
	}
	prom := startPrometheus(t, n.httpURL[len("http://"):], "admin", "admin123")
	prom.waitValue(t, `up{job="malachi"}`, "== 1", equals(1))
	prom.waitValue(t, `malachi_up`, "== 1", equals(1))
	before := prom.waitValue(t, `malachi_records_produced_total`, "== 0", equals(0))

	c := n.dial(t)
	if err := c.CreateTopic(t.Context(), "orders"); err != nil {
		t.Fatal(err)
	}
	const sent = 42
	produce(t, c, "orders", sent)
	prom.waitValue(t, `malachi_records_produced_total`, fmt.Sprintf("== %d", sent), equals(before+sent))
	prom.waitValue(t, `malachi_produce_requests_total{result="ok"}`, "== 5", equals(5))
	prom.waitValue(t, `malachi_storage_fsync_latency_seconds_count`, "> 0", func(v float64) bool { return v > 0 })
	prom.waitValue(t, `sum(malachi_storage_commit_round_batches_count)`, "> 0", func(v float64) bool { return v > 0 })
	prom.waitValue(t, `malachi_topic_records{topic="orders"}`, fmt.Sprintf("== %d", sent), equals(sent))
	prom.waitValue(t, `histogram_quantile(0.99, rate(malachi_produce_latency_seconds_bucket[1m]))`, "> 0", func(v float64) bool { return v > 0 })

	// A group that read part of the topic lags by the rest, in records and
	// in time; once it commits everything the lag falls to 0.
	consume(t, c, "orders", "billing", 12)
	prom.waitValue(t, `malachi_consumer_group_lag_records{topic="orders",group="billing"}`, "== 30", equals(sent-12))
	prom.waitValue(t, `malachi_consumer_group_lag_seconds{topic="orders",group="billing"}`, "> 0", func(v float64) bool { return v > 0 })
	consume(t, c, "orders", "billing", sent-12)
	prom.waitValue(t, `malachi_records_consumed_total`, fmt.Sprintf("== %d", sent), equals(sent))
	prom.waitValue(t, `malachi_consumer_group_lag_records{topic="orders",group="billing"}`, "== 0", equals(0))
	prom.waitValue(t, `malachi_consumer_group_lag_seconds{topic="orders",group="billing"}`, "== 0", equals(0))
	// The lag series kept their history: Prometheus saw it above 0.
	prom.waitValue(t, `max_over_time(malachi_consumer_group_lag_records{topic="orders",group="billing"}[5m])`, "== 30", equals(sent-12))
}
