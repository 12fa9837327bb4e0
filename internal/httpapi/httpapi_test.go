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
