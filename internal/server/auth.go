package server

import (
	"math"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// Authentication on a connection.
//
// The first frame must be auth (0), mtls_auth (12), token_auth (13) or
// session_auth (84), after at most a few api_versions (79);
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
	case wire.KeyAuth, wire.KeyMTLSAuth, wire.KeyTokenAuth, wire.KeySessionAuth:
	case wire.KeyAPIVersions:
		return c.preAuthVersions(corr, payload)
	default:
		c.reply(wire.AppendErrorFrame(nil, corr, wire.ReasonAuthRequired))
		return false
	}
	req, err := wire.DecodeRequest(key, payload)
	if err != nil {
		c.reply(authRefusal(key, corr, wire.ReasonMalformedRequest, 0))
		return false
	}
	id, resumed, err := c.login(req)
	c.s.traffic.login(err)
	if err != nil {
		c.reply(authRefusal(key, corr, reason(err), broker.RetryAfter(err)))
		return false
	}
	c.ident.Store(id)
	c.authed = true
	c.s.loggedIn(c)
	return c.reply(authAnswer(req, corr, id, resumed))
}

// authAnswer is the answer to a successful login: its resumption token, with
// its expiry for session_auth.
func authAnswer(req wire.Request, corr uint32, id *broker.Identity, resumed bool) []byte {
	if _, ok := req.(*wire.SessionAuthRequest); ok {
		resp := &wire.SessionAuthResponse{Token: id.Token, ExpiresMs: uint64(max(id.TokenExpiresMs, 0)), Resumed: resumed}
		return wire.AppendOKFrame(nil, corr, resp)
	}
	return wire.AppendOKFrame(nil, corr, &wire.TokenResponse{Token: id.Token})
}

// authRefusal is the answer to a failed login. session_auth's refusals
// carry a retry-after hint (code 2); the v1 keys' stay as v1 has them.
func authRefusal(key uint16, corr uint32, reason string, after time.Duration) []byte {
	if key != wire.KeySessionAuth {
		return wire.AppendErrorFrame(nil, corr, reason)
	}
	ms := uint32(min(after.Milliseconds(), math.MaxUint32))
	if after > 0 && ms == 0 {
		ms = 1
	}
	return wire.AppendHintErrorFrame(nil, corr, reason, ms)
}

// reauth switches an authenticated connection to a new identity. It runs
// on the reader goroutine, so requests read after the auth frame use the
// new identity; each request reads the identity once, when it starts. A failed
// re-authentication counts as a failed login and closes the connection:
// a connection must not be a free place to guess passwords from.
func (c *conn) reauth(corr uint32, req wire.Request) {
	id, resumed, err := c.login(req)
	c.s.traffic.login(err)
	if err != nil {
		c.queue(authRefusal(req.APIKey(), corr, reason(err), broker.RetryAfter(err)))
		c.drain()
		return
	}
	c.ident.Store(id)
	c.queue(authAnswer(req, corr, id, resumed))
}

// login turns an auth request into the broker's credentials. A
// session_auth tries its session token first and its password only if
// the token is absent or refused; resumed says the token logged in.
func (c *conn) login(req wire.Request) (id *broker.Identity, resumed bool, err error) {
	cr := broker.Credentials{Addr: c.ip, TLS: c.tlsState(), ListenerVerifies: c.s.verifiesClientCerts()}
	switch r := req.(type) {
	case *wire.AuthRequest:
		cr.Method, cr.User, cr.Password = broker.MethodPassword, deref(r.User), deref(r.Password)
	case *wire.MTLSAuthRequest:
		cr.Method = broker.MethodMTLS
	case *wire.TokenAuthRequest:
		cr.Method, cr.Token = broker.MethodToken, deref(r.JWT)
	case *wire.SessionAuthRequest:
		if r.Token != nil {
			cr.Token = *r.Token
			id, err = c.s.b.Resume(cr)
			if err == nil || r.User == nil {
				return id, err == nil, err
			}
		}
		if r.User == nil {
			return nil, false, broker.ErrCredentials
		}
		cr.Method, cr.Token, cr.User, cr.Password = broker.MethodPassword, "", *r.User, deref(r.Password)
	}
	id, err = c.s.b.Login(c.reqCtx, cr)
	return id, false, err
}

// isAuth reports whether req is one of the authentication requests.
func isAuth(req wire.Request) bool {
	switch req.(type) {
	case *wire.AuthRequest, *wire.MTLSAuthRequest, *wire.TokenAuthRequest, *wire.SessionAuthRequest:
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
