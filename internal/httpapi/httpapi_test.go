package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
)

type readiness struct{ err error }

func (r *readiness) Ready() error { return r.err }

func get(t *testing.T, url string) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func TestHealthAndReadiness(t *testing.T) {
	node := &readiness{}
	s := New("127.0.0.1:0", node, false)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Shutdown(t.Context())
	base := "http://" + s.Addr().String()
	if code, body := get(t, base+"/health"); code != 200 || body["status"] != "ok" {
		t.Fatalf("/health: %d %v", code, body)
	}
	if code, body := get(t, base+"/ready"); code != 200 || body["status"] != "ready" {
		t.Fatalf("/ready: %d %v", code, body)
	}
	node.err = errors.New("storage: failed")
	if code, body := get(t, base+"/ready"); code != 503 || body["reason"] != "storage: failed" {
		t.Fatalf("/ready while failed: %d %v", code, body)
	}
	resp, err := http.Get(base + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("profiles served without --pprof: %d", resp.StatusCode)
	}
}

func TestMetricsOnlyWhenMounted(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("malachi_up 1\n"))
	})
	for _, mounted := range []bool{false, true} {
		var opts []Option
		if mounted {
			opts = append(opts, WithMetrics(metrics))
		}
		s := New("127.0.0.1:0", &readiness{}, false, opts...)
		if err := s.Listen(); err != nil {
			t.Fatal(err)
		}
		go s.Serve()
		base := "http://" + s.Addr().String()
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusNotFound
		if mounted {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("mounted %v: /metrics answered %d, want %d", mounted, resp.StatusCode, want)
		}
		if code, body := get(t, base+"/health"); code != 200 || body["status"] != "ok" {
			t.Errorf("mounted %v: /health: %d %v", mounted, code, body)
		}
		s.Shutdown(t.Context())
	}
}
