package server

import (
	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// Authentication on a connection.
//
// The first frame must be auth (0), mtls_auth (12) or token_auth (13),
// after at most a few api_versions (79);
// the broker checks the credentials (and throttles failures). The identity
// it returns is immutable and held in an atomic pointer: a later auth
// frame swaps in a new one and each request copies the current one when
// it starts, so request goroutines never read an identity being written. Every request first asks the broker whether that
// identity still stands; once its user is deleted, its password changed
// or its certificate or token expired, the request is refused with
// invalid_credentials and the connection is closed.

// authenticate handles the first frame: only auth keys are accepted, and
// any failure closes the connection.
func (c *conn) authenticate(key uint16, corr uint32, payload []byte) bool {
	switch key {
	case wire.KeyAuth, wire.KeyMTLSAuth, wire.KeyTokenAuth:
	case wire.KeyAPIVersions:
		return c.preAuthVersions(corr, payload)
	default:
		c.reply(wire.AppendErrorFrame(nil, corr, wire.ReasonAuthRequired))
		return false
	}
	req, err := wire.DecodeRequest(key, payload)
	if err != nil {
		c.reply(wire.AppendErrorFrame(nil, corr, wire.ReasonMalformedRequest))
		return false
	}
	id, err := c.login(req)
	if err != nil {
		c.reply(wire.AppendErrorFrame(nil, corr, reason(err)))
		return false
	}
	c.ident.Store(id)
	c.authed = true
	c.s.loggedIn(c)
	return c.reply(wire.AppendOKFrame(nil, corr, &wire.TokenResponse{Token: id.Token}))
}

// reauth switches an authenticated connection to a new identity. It runs
// on the reader goroutine, so requests read after the auth frame use the
// new identity; each request reads the identity once, when it starts. A failed
// re-authentication counts as a failed login and closes the connection:
// a connection must not be a free place to guess passwords from.
func (c *conn) reauth(corr uint32, req wire.Request) {
	id, err := c.login(req)
	if err != nil {
		c.refuse(corr, reason(err))
		c.drain()
		return
	}
	c.ident.Store(id)
	c.answer(corr, &wire.TokenResponse{Token: id.Token}, nil)
}

// login turns an auth request into the broker's credentials.
func (c *conn) login(req wire.Request) (*broker.Identity, error) {
	cr := broker.Credentials{Addr: c.ip, TLS: c.tlsState(), ListenerVerifies: c.s.verifiesClientCerts()}
	switch r := req.(type) {
	case *wire.AuthRequest:
		cr.Method, cr.User, cr.Password = broker.MethodPassword, deref(r.User), deref(r.Password)
	case *wire.MTLSAuthRequest:
		cr.Method = broker.MethodMTLS
	case *wire.TokenAuthRequest:
		cr.Method, cr.Token = broker.MethodToken, deref(r.JWT)
	}
	return c.s.b.Login(c.reqCtx, cr)
}

// isAuth reports whether req is one of the authentication requests.
func isAuth(req wire.Request) bool {
	switch req.(type) {
	case *wire.AuthRequest, *wire.MTLSAuthRequest, *wire.TokenAuthRequest:
		return true
	}
	return false
}

// identity returns the connection's current identity: a copy of the
// immutable value the last successful auth frame stored.
func (c *conn) identity() broker.Identity {
	if id := c.ident.Load(); id != nil {
		return *id
	}
	return broker.Identity{}
}

// checkIdentity reports whether the connection's identity still stands.
// If not, the request (which holds a slot) is refused and the connection
// closes once the refusal is written.
func (c *conn) checkIdentity(corr uint32) bool {
	if err := c.s.b.CheckIdentity(c.identity()); err != nil {
		c.refuse(corr, reason(err))
		c.drain()
		return false
	}
	return true
}
