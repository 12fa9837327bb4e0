package auth

import (
	"crypto/rand"
	"encoding/base64"
)

// NewLoginToken returns the opaque token a successful login answers with
// (wire v1's `str(token)`). Nothing on the node looks a token up — every
// request is authorised by its connection's identity — so it is kept
// nowhere: a table of them would only be memory a client could fill.
func NewLoginToken() string {
	raw := make([]byte, 32)
	rand.Read(raw) // never fails (crypto/rand, Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(raw)
}
