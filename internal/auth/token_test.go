package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/malachi-log/malachi/internal/auth/authtest"
)

var tokenCfg = TokenConfig{Issuer: "https://idp.example", Audience: "malachi", PermsClaim: "malachi_perms"}

func baseClaims(now time.Time) jwt.MapClaims {
	return jwt.MapClaims{
		"iss": "https://idp.example", "aud": []string{"malachi", "other"}, "sub": "alice",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		"malachi_perms": []string{"consume"},
	}
}

func with(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for kk, vv := range c {
		out[kk] = vv
	}
	if v == nil {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

func TestVerifyToken(t *testing.T) {
	keys := authtest.NewSigners(t, "")
	ks, err := ParseJWKS(authtest.JWKS(t, keys...))
	if err != nil || ks.Len() != 3 {
		t.Fatalf("ParseJWKS: %v, %d keys", err, ks.Len())
	}
	now := time.Unix(1_800_000_000, 0)
	for _, k := range keys {
		got, err := VerifyToken(k.Sign(t, baseClaims(now)), tokenCfg, ks, now)
		if err != nil {
			t.Fatalf("%s: %v", k.Method.Alg(), err)
		}
		if got.User != "alice" || !slices.Equal(got.Perms, []string{"consume"}) || !got.ExpiresAt.Equal(now.Add(time.Hour)) {
			t.Fatalf("%s: claims %+v", k.Method.Alg(), got)
		}
	}
	rsaKey := keys[0]
	other := authtest.NewSigners(t, "")[0] // same kid, another key
	c := baseClaims(now)
	refused := map[string]string{
		"expired":                             rsaKey.Sign(t, with(c, "exp", now.Add(-31*time.Second).Unix())),
		"no exp":                              rsaKey.Sign(t, with(c, "exp", nil)),
		"not yet valid":                       rsaKey.Sign(t, with(c, "nbf", now.Add(time.Minute).Unix())),
		"issued in future":                    rsaKey.Sign(t, with(c, "iat", now.Add(time.Minute).Unix())),
		"wrong issuer":                        rsaKey.Sign(t, with(c, "iss", "https://evil.example")),
		"wrong audience":                      rsaKey.Sign(t, with(c, "aud", "someone-else")),
		"wrong key":                           other.Sign(t, c),
		"no user":                             rsaKey.Sign(t, with(c, "sub", "")),
		"bad perms":                           rsaKey.Sign(t, with(c, "malachi_perms", []string{"root"})),
		"alg none":                            authtest.NoneToken(t, "rsa", c),
		"HS256 with the public key as secret": authtest.HMACToken(t, rsaKey, c),
		"garbage":                             "a.b.c",
		"too long":                            strings.Repeat("a", MaxTokenLen+1),
	}
	for name, tok := range refused {
		if _, err := VerifyToken(tok, tokenCfg, ks, now); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: err %v, want ErrInvalidToken", name, err)
		}
	}
	// Within the leeway an expired token still passes.
	if _, err := VerifyToken(rsaKey.Sign(t, with(c, "exp", now.Add(-29*time.Second).Unix())), tokenCfg, ks, now); err != nil {
		t.Errorf("expired within the leeway: %v", err)
	}
	unknown := authtest.Signer{Kid: "rsa-2", Method: jwt.SigningMethodRS256, Key: rsaKey.Key}
	if _, err := VerifyToken(unknown.Sign(t, c), tokenCfg, ks, now); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown kid: %v", err)
	}
}

func TestTokenPermsClaim(t *testing.T) {
	keys := authtest.NewSigners(t, "")
	ks, _ := ParseJWKS(authtest.JWKS(t, keys...))
	now := time.Unix(1_800_000_000, 0)
	for claim, want := range map[any][]string{"produce consume": {"produce", "consume"}} {
		got, err := VerifyToken(keys[2].Sign(t, with(baseClaims(now), "malachi_perms", claim)), tokenCfg, ks, now)
		if err != nil || !slices.Equal(got.Perms, want) {
			t.Errorf("claim %v: %v, %v", claim, got.Perms, err)
		}
	}
	// Without PermsClaim configured the permissions come from the account.
	cfg := tokenCfg
	cfg.PermsClaim = ""
	got, err := VerifyToken(keys[2].Sign(t, baseClaims(now)), cfg, ks, now)
	if err != nil || got.Perms != nil {
		t.Fatalf("no perms claim configured: %v, %v", got.Perms, err)
	}
	cfg.UserClaim = "email"
	if _, err := VerifyToken(keys[2].Sign(t, baseClaims(now)), cfg, ks, now); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("missing user claim: %v", err)
	}
}

func TestParseJWKSSkipsUnusableKeys(t *testing.T) {
	keys := authtest.NewSigners(t, "")
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: []byte("shared-secret"), KeyID: "oct"},
		{Key: &small.PublicKey, KeyID: "small"},
		{Key: &p384.PublicKey, KeyID: "p384"},
		{Key: keys[1].Key.Public(), KeyID: "enc", Use: "enc"},
		{Key: keys[0].Key.Public(), KeyID: "wrong-alg", Algorithm: "RS512"},
		{Key: keys[0].Key, KeyID: "private"}, // published by mistake: only its public half is kept
	}}
	raw, _ := json.Marshal(set)
	ks, err := ParseJWKS(raw)
	if err != nil || ks.Len() != 1 || ks.keys[0].kid != "private" {
		t.Fatalf("ParseJWKS kept %d keys (%v)", ks.Len(), err)
	}
	if _, ok := ks.keys[0].key.(*rsa.PublicKey); !ok {
		t.Fatal("a private key was kept")
	}
	for _, bad := range []string{"", "{", `{"keys":[]}`, `{"keys":[{"kty":"oct","k":"AAAA"}]}`} {
		if _, err := ParseJWKS([]byte(bad)); err == nil {
			t.Errorf("ParseJWKS(%q) succeeded", bad)
		}
	}
}
