package broker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/auth"
)

// jwksCache holds the keys token_auth verifies with: those of the JWKS
// file, read once at start, and those fetched from the JWKS URL.
//
// Fetches happen on the login that needs them, never in the background:
// the first token login, one that finds the keys older than JWKSMaxAge,
// and one whose token names a key id the set lacks (the issuer rotated its
// keys). JWKSMinInterval spaces fetches however many logins ask, so forged
// key ids cannot turn the node into a client hammering the issuer; one
// fetch runs at a time and the logins waiting for it share its answer.
// A failed fetch keeps the keys already held. With no goroutine there is
// nothing to stop on Close.
type jwksCache struct {
	cfg    OIDCConfig
	log    *slog.Logger
	file   *auth.KeySet
	client *http.Client

	fetched atomic.Pointer[fetchedKeys]
	mu      sync.Mutex // one fetch at a time; guards lastTry
	lastTry time.Time
}

type fetchedKeys struct {
	keys *auth.KeySet
	at   time.Time
}

func newJWKSCache(cfg OIDCConfig, log *slog.Logger) (*jwksCache, error) {
	j := &jwksCache{cfg: cfg, log: log, client: &http.Client{Timeout: cfg.JWKSTimeout}}
	if cfg.JWKSFile != "" {
		raw, err := os.ReadFile(cfg.JWKSFile)
		if err != nil {
			return nil, fmt.Errorf("broker: token auth JWKS: %w", err)
		}
		if j.file, err = auth.ParseJWKS(raw); err != nil {
			return nil, fmt.Errorf("broker: token auth JWKS %s: %w", cfg.JWKSFile, err)
		}
	}
	return j, nil
}

// keys returns the keys to verify with at now, fetching first if the URL
// was never fetched or its keys are older than JWKSMaxAge.
func (j *jwksCache) keys(ctx context.Context, now time.Time) *auth.KeySet {
	f := j.fetched.Load()
	if j.cfg.JWKSURL != "" && (f == nil || now.Sub(f.at) >= j.cfg.JWKSMaxAge) {
		j.fetch(ctx, now)
	}
	return j.current()
}

// refresh fetches the URL again, if the minimum interval allows, for a
// token whose key id is unknown; it reports whether the keys changed.
func (j *jwksCache) refresh(ctx context.Context, now time.Time) (*auth.KeySet, bool) {
	before := j.fetched.Load()
	if j.cfg.JWKSURL == "" {
		return j.current(), false
	}
	j.fetch(ctx, now)
	return j.current(), j.fetched.Load() != before
}

func (j *jwksCache) current() *auth.KeySet {
	var fetched *auth.KeySet
	if f := j.fetched.Load(); f != nil {
		fetched = f.keys
	}
	return j.file.Merge(fetched)
}

// fetch gets the URL's key set unless a fetch was tried less than
// JWKSMinInterval ago.
func (j *jwksCache) fetch(ctx context.Context, now time.Time) {
	before := j.fetched.Load()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fetched.Load() != before {
		return // another login fetched while this one waited
	}
	if !j.lastTry.IsZero() && now.Sub(j.lastTry) < j.cfg.JWKSMinInterval {
		return
	}
	j.lastTry = now
	keys, err := j.get(ctx)
	if err != nil {
		j.log.Warn("token auth: fetching the JWKS failed; keeping the keys held", "url", j.cfg.JWKSURL, "err", err)
		return
	}
	j.fetched.Store(&fetchedKeys{keys: keys, at: now})
}

func (j *jwksCache) get(ctx context.Context) (*auth.KeySet, error) {
	ctx, cancel := context.WithTimeout(ctx, j.cfg.JWKSTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.cfg.JWKSURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, j.cfg.JWKSMaxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > j.cfg.JWKSMaxBytes {
		return nil, fmt.Errorf("key set larger than %d bytes", j.cfg.JWKSMaxBytes)
	}
	return auth.ParseJWKS(raw)
}
