package main

import (
	"bufio"
	"crypto/tls"
	"net"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/wire"
)

// fakeNode is a scripted wire server for CLI tests that need answers a
// real node will not give (crafted names, a refusal with a hostile
// reason) or need to see exactly what the CLI sent (which credentials,
// over TLS or not). Every authentication frame is accepted and recorded;
// other requests are answered by answer, or refused with
// unknown_api_key.
type fakeNode struct {
	ln     net.Listener
	answer func(req wire.Request) (wire.Response, string)

	mu    sync.Mutex
	auths []fakeAuth
	conns []net.Conn
}

// fakeAuth is one authentication frame the fake received.
type fakeAuth struct {
	key                uint16
	user, password     string
	jwt                string
	tls                bool
	peerCN             string // subject CN of the verified client certificate
	hasUser, hasPasswd bool
}

// startFakeNode serves on a loopback port, over TLS when cfg is not nil.
// answer returns an ok response, or "" and a reason to refuse with.
func startFakeNode(t *testing.T, cfg *tls.Config, answer func(wire.Request) (wire.Response, string)) *fakeNode {
	t.Helper()
	var (
		ln  net.Listener
		err error
	)
	if cfg != nil {
		ln, err = tls.Listen("tcp", "127.0.0.1:0", cfg)
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{ln: ln, answer: answer}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, nc)
			f.mu.Unlock()
			wg.Go(func() { f.serve(nc) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, nc := range f.conns {
			nc.Close()
		}
		f.mu.Unlock()
		wg.Wait()
	})
	return f
}

func (f *fakeNode) addr() string { return f.ln.Addr().String() }

func (f *fakeNode) serve(nc net.Conn) {
	defer nc.Close()
	a := fakeAuth{}
	if tc, ok := nc.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return
		}
		a.tls = true
		if st := tc.ConnectionState(); len(st.PeerCertificates) > 0 {
			a.peerCN = st.PeerCertificates[0].Subject.CommonName
		}
	}
	br := bufio.NewReader(nc)
	for {
		body, err := wire.ReadFrame(br, 0, nil)
		if err != nil {
			return
		}
		key, corr, payload, err := wire.ParseRequestHeader(body)
		if err != nil {
			return
		}
		req, err := wire.DecodeRequest(key, payload)
		if err != nil {
			nc.Write(wire.AppendErrorFrame(nil, corr, wire.ReasonMalformedRequest))
			continue
		}
		switch r := req.(type) {
		case *wire.AuthRequest, *wire.MTLSAuthRequest, *wire.TokenAuthRequest:
			rec := a
			rec.key = key
			switch r := r.(type) {
			case *wire.AuthRequest:
				rec.hasUser, rec.hasPasswd = r.User != nil, r.Password != nil
				rec.user, rec.password = deref(r.User), deref(r.Password)
			case *wire.TokenAuthRequest:
				rec.jwt = deref(r.JWT)
			}
			f.mu.Lock()
			f.auths = append(f.auths, rec)
			f.mu.Unlock()
			nc.Write(wire.AppendOKFrame(nil, corr, wire.TokenResponse{Token: "session"}))
			continue
		}
		resp, reason := wire.Response(nil), wire.ReasonUnknownAPIKey
		if f.answer != nil {
			resp, reason = f.answer(req)
		}
		if reason != "" {
			nc.Write(wire.AppendErrorFrame(nil, corr, reason))
			continue
		}
		nc.Write(wire.AppendOKFrame(nil, corr, resp))
	}
}

// authsSeen returns the authentication frames received so far.
func (f *fakeNode) authsSeen() []fakeAuth {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeAuth(nil), f.auths...)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// statusOK answers status with a fixed node, for tests that only need a
// command to succeed.
func statusOK(req wire.Request) (wire.Response, string) {
	if _, ok := req.(*wire.StatusRequest); ok {
		return wire.StatusResponse{NodeID: "fake", Version: "0", DataDir: "/fake"}, ""
	}
	return nil, wire.ReasonUnknownAPIKey
}
