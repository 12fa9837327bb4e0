// Package httpapi serves the node's HTTP side: liveness (/health) and
// readiness (/ready) for orchestrators, and Prometheus metrics (/metrics,
// WithMetrics). The dashboard and the admin JSON API join it here.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Readiness reports whether the node serves requests (nil = ready).
type Readiness interface {
	Ready() error
}

// Server is the HTTP listener.
type Server struct {
	srv *http.Server
	mux *http.ServeMux
	ln  net.Listener
}

// Option adds a route to New's handler set.
type Option func(*http.ServeMux)

// WithMetrics serves h (internal/metrics' handler) at GET /metrics, for
// Prometheus to scrape.
func WithMetrics(h http.Handler) Option {
	return func(mux *http.ServeMux) { mux.Handle("GET /metrics", h) }
}

// New builds the handler set for a node. With profiling, the Go runtime
// profiles are served under /debug/pprof/ (off by default: they reveal
// internals and cost CPU while taken).
func New(addr string, node Readiness, profiling bool, opts ...Option) *Server {
	mux := http.NewServeMux()
	for _, o := range opts {
		o(mux)
	}
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if err := node.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not_ready", "reason": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	return &Server{mux: mux, srv: &http.Server{
		Addr:              addr,
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// Mount serves h under pattern (a net/http ServeMux pattern, such as "/"
// for everything the node's own routes leave). Call it before Serve; the
// more specific pattern wins, so /health and /ready stay the node's. If h
// has a Close method, Shutdown calls it as it begins, so that answers
// that never end by themselves (event streams) do not hold it up.
func (s *Server) Mount(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
	if c, ok := h.(interface{ Close() }); ok {
		s.srv.RegisterOnShutdown(c.Close)
	}
}

// Listen binds the address.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.srv.Addr)
	if err != nil {
		return fmt.Errorf("httpapi: listen %s: %w", s.srv.Addr, err)
	}
	s.ln = ln
	return nil
}

// ListenOn serves on ln, bound by the caller, instead of binding the
// address: see server.Server.ListenOn.
func (s *Server) ListenOn(ln net.Listener) { s.ln = ln }

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops the server gracefully.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }
