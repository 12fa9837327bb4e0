package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

// TokenAlgorithms are the only JWT signature algorithms accepted. Pinning
// them refuses "none" and every HMAC algorithm, so a public key can never
// be used as an HMAC secret (the RS256/HS256 confusion).
var TokenAlgorithms = []string{"RS256", "ES256", "EdDSA"}

// Token verification limits.
const (
	DefaultTokenLeeway = 30 * time.Second
	DefaultUserClaim   = "sub"
	MaxTokenLen        = 16 << 10 // bytes of a compact JWT
	minRSABits         = 2048
)

// Errors of token verification.
var (
	// ErrUnknownKey: the token names a key id the key set does not hold.
	// The caller may refresh its keys and try once more.
	ErrUnknownKey = errors.New("auth: unknown token key")
	// ErrInvalidToken covers every other reason a token is refused.
	ErrInvalidToken = errors.New("auth: invalid token")
)

// TokenConfig says what a valid token looks like.
type TokenConfig struct {
	Issuer   string // the iss claim, required
	Audience string // a value the aud claim must hold, required
	// UserClaim names the claim holding the user name; default "sub".
	UserClaim string
	// PermsClaim, if set, names a claim holding the user's permissions (a
	// list of strings, or one space-separated string). Unset, the
	// permissions come from the user's account.
	PermsClaim string
	// Leeway absorbs clock skew in exp, nbf and iat; default 30 s.
	Leeway time.Duration
}

// TokenClaims is what a verified token says.
type TokenClaims struct {
	User      string
	Perms     []string // nil unless PermsClaim is configured
	ExpiresAt time.Time
}

// VerifyToken checks raw's signature against keys, pins the algorithm,
// and checks iss, aud, exp (required), nbf and iat at now with the
// configured leeway.
func VerifyToken(raw string, cfg TokenConfig, keys *KeySet, now time.Time) (TokenClaims, error) {
	if len(raw) > MaxTokenLen {
		return TokenClaims{}, fmt.Errorf("%w: %d bytes", ErrInvalidToken, len(raw))
	}
	if cfg.Issuer == "" || cfg.Audience == "" {
		return TokenClaims{}, fmt.Errorf("%w: issuer and audience must be configured", ErrInvalidToken)
	}
	leeway := cfg.Leeway
	if leeway == 0 {
		leeway = DefaultTokenLeeway
	}
	p := jwt.NewParser(
		jwt.WithValidMethods(TokenAlgorithms),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	claims := jwt.MapClaims{}
	if _, err := p.ParseWithClaims(raw, claims, keys.keyfunc); err != nil {
		if errors.Is(err, ErrUnknownKey) {
			return TokenClaims{}, ErrUnknownKey
		}
		return TokenClaims{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	return tokenClaims(claims, cfg)
}

func tokenClaims(claims jwt.MapClaims, cfg TokenConfig) (TokenClaims, error) {
	userClaim := cfg.UserClaim
	if userClaim == "" {
		userClaim = DefaultUserClaim
	}
	user, _ := claims[userClaim].(string)
	if user == "" {
		return TokenClaims{}, fmt.Errorf("%w: no %q claim", ErrInvalidToken, userClaim)
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return TokenClaims{}, fmt.Errorf("%w: exp", ErrInvalidToken)
	}
	out := TokenClaims{User: user, ExpiresAt: exp.Time}
	if cfg.PermsClaim != "" {
		perms, ok := permsFromClaim(claims[cfg.PermsClaim])
		if !ok || !ValidPerms(perms) {
			return TokenClaims{}, fmt.Errorf("%w: %q claim", ErrInvalidToken, cfg.PermsClaim)
		}
		out.Perms = perms
	}
	return out, nil
}

// permsFromClaim accepts a JSON list of strings or a space-separated
// string (the OAuth scope style). A missing claim is no permissions.
func permsFromClaim(v any) ([]string, bool) {
	switch v := v.(type) {
	case nil:
		return []string{}, true
	case string:
		return strings.Fields(v), true
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

// KeySet holds the public keys tokens may be signed with. It is immutable
// once built.
type KeySet struct{ keys []tokenKey }

type tokenKey struct {
	kid, alg string
	key      crypto.PublicKey
}

// ParseJWKS reads a JSON Web Key Set. Keys that cannot verify one of
// TokenAlgorithms (symmetric keys, small RSA keys, other curves, keys
// marked for encryption) are skipped rather than failing the whole set, so
// an identity provider that publishes extra keys still works; a set that
// is not JSON, or has no usable key, is an error.
func ParseJWKS(data []byte) (*KeySet, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("auth: JWKS: %w", err)
	}
	ks := &KeySet{}
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil || !k.Valid() || (k.Use != "" && k.Use != "sig") {
			continue
		}
		pub := k.Public()
		if pub.Key == nil || keyAlg(pub.Key) == "" {
			continue
		}
		if k.Algorithm != "" && k.Algorithm != keyAlg(pub.Key) {
			continue
		}
		ks.keys = append(ks.keys, tokenKey{kid: k.KeyID, alg: keyAlg(pub.Key), key: pub.Key})
	}
	if len(ks.keys) == 0 {
		return nil, errors.New("auth: JWKS holds no usable signing key")
	}
	return ks, nil
}

// Merge returns a set holding the keys of s and then those of o; either
// may be nil.
func (s *KeySet) Merge(o *KeySet) *KeySet {
	out := &KeySet{}
	if s != nil {
		out.keys = append(out.keys, s.keys...)
	}
	if o != nil {
		out.keys = append(out.keys, o.keys...)
	}
	return out
}

// Len returns the number of keys held.
func (s *KeySet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.keys)
}

// keyfunc gives the JWT parser the keys that may have signed token: those
// with its kid (every key, for a token without one) and of its algorithm.
func (s *KeySet) keyfunc(token *jwt.Token) (any, error) {
	alg := token.Method.Alg()
	kid, _ := token.Header["kid"].(string)
	var set jwt.VerificationKeySet
	known := false
	for _, k := range s.all() {
		if kid != "" && k.kid != kid {
			continue
		}
		known = true
		if k.alg == alg {
			set.Keys = append(set.Keys, k.key)
		}
	}
	if !known {
		return nil, ErrUnknownKey
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("no %s key", alg)
	}
	return set, nil
}

func (s *KeySet) all() []tokenKey {
	if s == nil {
		return nil
	}
	return s.keys
}

// keyAlg returns the one algorithm of TokenAlgorithms key can verify, or
// "" if none.
func keyAlg(key crypto.PublicKey) string {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() >= minRSABits {
			return "RS256"
		}
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return "ES256"
		}
	case ed25519.PublicKey:
		return "EdDSA"
	}
	return ""
}
