package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
)

// Session tokens: what a successful login answers (wire v1's str(token))
// and what session_auth (wire key 84) takes back to log a new connection
// in without a password hash. A token is the login's claims followed by an
// HMAC-SHA256 (truncated to 128 bits) under a key derived from the
// cluster secret, so the node keeps no table of them and any node of the
// cluster can check one. A token names the credential it was issued
// against (Cred, a fingerprint of the user's stored password hash): a
// changed password or a deleted and re-created user gives a different
// fingerprint, so the token is refused, across restarts too, without
// anything stored per token.

// Session token errors.
var (
	// ErrSessionInvalid: not a token this key signed (malformed, altered,
	// or from another cluster).
	ErrSessionInvalid = errors.New("auth: invalid session token")
)

// SessionMethod is how the login a token continues was made.
type SessionMethod uint8

// Session methods.
const (
	SessionPassword SessionMethod = iota + 1
	SessionCert
	SessionJWT
)

// SessionClaims is what a session token says.
type SessionClaims struct {
	User   string
	Method SessionMethod
	// TLS: the login was made over TLS, so the token is accepted only
	// over TLS (it would otherwise cross the network in the clear).
	TLS bool
	// OwnPerms: a JWT's permissions claim, not an account, holds the
	// permissions (Perms); the token is then bound to no account.
	OwnPerms bool
	Perms    []string
	// IssuedMs is when the password, certificate or JWT was checked:
	// renewals keep it, so a login session cannot be renewed forever.
	IssuedMs int64
	// ExpiresMs is when this token stops being accepted.
	ExpiresMs int64
	// CredExpiresMs is when the certificate or JWT behind the login
	// expires (0: never); the resumed identity ends then too.
	CredExpiresMs int64
	// Cred fingerprints the account's credential at login (CredFingerprint).
	Cred [8]byte
}

const (
	sessionVersion = 1
	sessionMACLen  = 16
	// sessionFixedLen: version, method, flags, perms, three times, cred,
	// user length.
	sessionFixedLen = 4 + 3*8 + 8 + 1
	maxSessionUser  = 255
)

// MaxSessionTokenLen bounds an encoded token: anything longer is refused
// before it is decoded.
const MaxSessionTokenLen = 512

// SessionKey derives the token MAC key from the cluster secret, so the
// secret's other uses (cursor MACs) never share a key with tokens.
func SessionKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("malachi session token key v1"))
	return m.Sum(nil)
}

// CredFingerprint fingerprints a stored password hash. The hash is salted
// afresh on every password change and user creation, so the fingerprint
// changes with either; it reveals nothing usable about the password.
func CredFingerprint(storedHash string) [8]byte {
	sum := sha256.Sum256([]byte("malachi credential v1\x00" + storedHash))
	var f [8]byte
	copy(f[:], sum[:])
	return f
}

var permBits = []string{PermAdmin, PermProduce, PermConsume}

// SealSession encodes and signs c. User names longer than 255 bytes
// cannot be accounts and are refused.
func SealSession(key []byte, c SessionClaims) (string, error) {
	if len(c.User) == 0 || len(c.User) > maxSessionUser {
		return "", ErrSessionInvalid
	}
	b := make([]byte, 0, sessionFixedLen+len(c.User)+sessionMACLen)
	var flags, perms byte
	if c.TLS {
		flags |= 1
	}
	if c.OwnPerms {
		flags |= 2
	}
	for i, p := range permBits {
		if HasPerm(c.Perms, p) {
			perms |= 1 << i
		}
	}
	b = append(b, sessionVersion, byte(c.Method), flags, perms)
	b = binary.BigEndian.AppendUint64(b, uint64(c.IssuedMs))
	b = binary.BigEndian.AppendUint64(b, uint64(c.ExpiresMs))
	b = binary.BigEndian.AppendUint64(b, uint64(c.CredExpiresMs))
	b = append(b, c.Cred[:]...)
	b = append(b, byte(len(c.User)))
	b = append(b, c.User...)
	b = append(b, sessionMAC(key, b)...)
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// OpenSession checks a token's MAC and decodes its claims. It does not
// look at the time or the accounts: the caller checks expiry and
// revocation.
func OpenSession(key []byte, token string) (SessionClaims, error) {
	if len(token) > MaxSessionTokenLen {
		return SessionClaims{}, ErrSessionInvalid
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < sessionFixedLen+sessionMACLen {
		return SessionClaims{}, ErrSessionInvalid
	}
	body, mac := b[:len(b)-sessionMACLen], b[len(b)-sessionMACLen:]
	if !hmac.Equal(mac, sessionMAC(key, body)) {
		return SessionClaims{}, ErrSessionInvalid
	}
	// Signed by this key, so well formed unless a later version wrote it.
	userLen := int(body[sessionFixedLen-1])
	if body[0] != sessionVersion || len(body) != sessionFixedLen+userLen || userLen == 0 {
		return SessionClaims{}, ErrSessionInvalid
	}
	c := SessionClaims{
		Method:        SessionMethod(body[1]),
		TLS:           body[2]&1 != 0,
		OwnPerms:      body[2]&2 != 0,
		IssuedMs:      int64(binary.BigEndian.Uint64(body[4:])),
		ExpiresMs:     int64(binary.BigEndian.Uint64(body[12:])),
		CredExpiresMs: int64(binary.BigEndian.Uint64(body[20:])),
		User:          string(body[sessionFixedLen:]),
	}
	copy(c.Cred[:], body[28:36])
	for i, p := range permBits {
		if body[3]&(1<<i) != 0 {
			c.Perms = append(c.Perms, p)
		}
	}
	return c, nil
}

func sessionMAC(key, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return m.Sum(nil)[:sessionMACLen]
}
