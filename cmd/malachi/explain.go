package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// errSubject names what a command is about, so that an error can say what
// to do next ("create it with 'malachi topic create orders'").
type errSubject struct {
	topic string
	user  string // the user a user or acl command is about
	group string
	// policy is the storage policy a policy command names.
	policy string
	set    settings
	// adminOnly marks operations only an administrator may run, where a
	// grant would not help.
	adminOnly bool
	// existing marks operations on a topic that must already exist
	// (delete, describe), where creating it is no answer.
	existing bool
	// op is what the operation does, when it needs the produce or consume
	// permission: produce, consume or create (a topic, which takes
	// produce); "" otherwise.
	op string
}

// explain turns err into the one line main prints, "reason: what to do",
// with exit code 1 (130, as shells report SIGINT, when interrupted).
// Errors that already carry an exit code pass through.
func explain(err error, sub errSubject) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	code := 1
	if errors.Is(err, errInterrupted) || errors.Is(err, context.Canceled) {
		code = 130
	}
	return &exitError{code: code, err: errors.New(explainText(err, sub))}
}

func explainText(err error, sub errSubject) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Reason + ": " + reasonHint(ce, sub)
	}
	addr := sub.set.Server
	switch {
	case errors.Is(err, errInterrupted), errors.Is(err, context.Canceled):
		return "interrupted"
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("cannot reach %s: is 'malachi serve' running? (or set --server / MALACHI_SERVER)", addr)
	case errors.Is(err, client.ErrRequestTimeout):
		return fmt.Sprintf("no answer from %s within %s: is the address right? (raise --timeout for slow operations)", addr, sub.set.Timeout)
	case errors.Is(err, client.ErrRequestTooLarge):
		return "record too large: a request may not exceed the server's frame limit (16 MiB by default)"
	case errors.Is(err, client.ErrTLS):
		return fmt.Sprintf("TLS with %s failed: %s: check --tls-ca (the CA that signed the server's certificate) and --tls-server-name, and --tls-cert/--tls-key if the server wants a client certificate",
			addr, tlsReason(err, addr))
	case (errors.Is(err, client.ErrProtocol) || errors.Is(err, client.ErrDisconnected)) && speaksHTTP(addr):
		return fmt.Sprintf("%s is an HTTP server (the node's health port?), not a Malachi client port: nothing was done; "+
			"point --server at the client protocol address ('malachi serve' prints it, 127.0.0.1:4040 by default)", addr)
	case errors.Is(err, client.ErrProtocol):
		return fmt.Sprintf("%s does not speak the Malachi protocol this client expects: %v%s", addr, err, plainHint(err, sub))
	case errors.Is(err, client.ErrDisconnected):
		return fmt.Sprintf("connection to %s failed: %s%s", addr, netReason(err), plainHint(err, sub))
	}
	return strings.TrimPrefix(err.Error(), "malachi: ")
}

// plainHint suggests TLS after a plain connection was cut or answered
// with bytes that are no Malachi frame: that is how a server that
// requires TLS treats a client that does not start with a handshake.
func plainHint(err error, sub errSubject) string {
	if sub.set.TLS {
		return ""
	}
	if errors.Is(err, client.ErrProtocol) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return " (if the server requires TLS, pass --tls or --tls-ca)"
	}
	return ""
}

// tlsReason is the TLS failure without the client's wrapping.
func tlsReason(err error, addr string) string {
	return strings.TrimPrefix(err.Error(), client.ErrTLS.Error()+": "+addr+": ")
}

// netReason is the innermost network error text, without the client's
// "malachi: disconnected" wrapping.
func netReason(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		return de.Error()
	}
	return "the connection broke; the request may or may not have taken effect"
}

// reasonHint says what to do about a broker refusal.
func reasonHint(e *client.Error, sub errSubject) string {
	topic, user := orDefault(sub.topic, "TOPIC"), orDefault(sub.user, "USER")
	switch e.Reason {
	case "no_such_topic":
		switch {
		case sub.topic != "" && !validTopicName(sub.topic):
			return fmt.Sprintf("%q is not a topic name: names are letters, digits, '.', '_' and '-'; "+
				"patterns such as orders.* are for 'malachi acl grant'; see the topics with 'malachi topic list'", sub.topic)
		case sub.existing:
			return fmt.Sprintf("there is no topic %s; see the topics with 'malachi topic list'", topic)
		}
		return fmt.Sprintf("create it with 'malachi topic create %s'", topic)
	case "already_exists":
		return fmt.Sprintf("topic %s already exists; see 'malachi topic describe %s'", topic, topic)
	case "tls_required":
		return "the server accepts TLS connections only: pass --tls-ca with the CA that signed its certificate (or --tls to trust the system's roots)"
	case "mtls_auth_disabled", "mtls_auth_unavailable", "no_peer_certificate":
		return sentence(e) + " (--auth mtls needs a server started with a client CA and mtls_auth on, and --tls-cert/--tls-key here)"
	case "invalid_credentials":
		switch sub.set.Auth {
		case authToken:
			return "the server did not accept the token: check --token/--token-file (or MALACHI_TOKEN/MALACHI_TOKEN_FILE); it may have expired"
		case authMTLS:
			return "the server did not accept the identity of the client certificate (--tls-cert): is there a user of that name?"
		}
		return "check --user/--password (or MALACHI_USER/MALACHI_PASSWORD)"
	case "permission_denied":
		if sub.adminOnly {
			return fmt.Sprintf("only an administrator may do this, and %s is not one: log in as an admin with --user/--password or a saved context (see 'malachi context')", sub.set.User)
		}
		return permissionHint(sub, topic)
	case "invalid_cursor":
		return "the cursor is not one this server issued for " + topic + "; start again with --from start or --group"
	case "sealed":
		return fmt.Sprintf("that range is no longer active (split or merged already); see the active ranges with 'malachi topic describe %s'", topic)
	case "no_such_range", "cannot_split", "not_buddies", "different_topic":
		return fmt.Sprintf("%s; see the ranges with 'malachi topic describe %s'", sentence(e), topic)
	case "group_has_members":
		return fmt.Sprintf("group %s has live members on %s; stop them (or wait for their sessions to expire) and try again", orDefault(sub.group, "GROUP"), topic)
	case "not_found":
		if sub.group != "" {
			return fmt.Sprintf("group %s has no committed position on %s; see 'malachi group list %s'", sub.group, topic, topic)
		}
	case "user_not_found":
		return fmt.Sprintf("no user %s; see 'malachi user list'", user)
	case "user_exists":
		return fmt.Sprintf("user %s already exists; change its password with 'malachi user passwd %s'", user, user)
	case "invalid_permissions":
		return "permissions are admin, produce and consume (comma-separated)"
	case "invalid_operation":
		return "the operation is produce or consume"
	case "invalid_range_count":
		return "--ranges must be a power of two no larger than 2^keyspace-bits"
	case "invalid_keyspace_bits":
		return "--keyspace-bits must be between 1 and 32"
	case "no_such_policy":
		return fmt.Sprintf("no policy %s; see 'malachi policy list', or define it with 'malachi policy define %s'",
			orDefault(sub.policy, "NAME"), orDefault(sub.policy, "NAME"))
	case "policy_in_use":
		return fmt.Sprintf("topics are bound to policy %s: bind them elsewhere ('malachi policy unbind TOPIC'), "+
			"or delete with --force, after which they expire nothing until bound again", orDefault(sub.policy, "NAME"))
	}
	if e.Retriable {
		return sentence(e) + "; gave up after retrying, try again shortly"
	}
	return sentence(e)
}

// sentence is the reason's description shaped to follow "reason: ":
// lower-case first letter, no final period.
func sentence(e *client.Error) string {
	d := strings.TrimSuffix(e.Description(), ".")
	if d == "" {
		return "the server refused the request"
	}
	return strings.ToLower(d[:1]) + d[1:]
}

// validTopicName mirrors the node's rule: 1 to 249 bytes of letters,
// digits, '.', '_' and '-', and not "." or "..".
func validTopicName(name string) bool {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return false
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// speaksHTTP reports whether addr answers an HTTP request: the usual
// reason a Malachi connection is cut at once is a --server pointing at the
// node's HTTP port. Only failures pay for this probe.
func speaksHTTP(addr string) bool {
	if addr == "" {
		return false
	}
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, "HEAD / HTTP/1.0\r\n\r\n"); err != nil {
		return false
	}
	buf := make([]byte, 5)
	_, err = io.ReadFull(conn, buf)
	return err == nil && string(buf) == "HTTP/"
}

// permissionHint says what lets a user refused a produce or consume do
// it. The client cannot tell the node's ACL mode; a grant for the topic
// works in both (auth.Allowed): a default node lets a user either through
// its own permission or through a grant, a node with --acl-strict through
// a grant only. The user's own permissions are set when it is created and
// no command changes them, so the grant is the one remedy to name.
func permissionHint(sub errSubject, topic string) string {
	op, action := "produce|consume", "do this on"
	switch sub.op {
	case "produce":
		op, action = "produce", "produce to"
	case "consume":
		op, action = "consume", "read"
	case "create":
		op, action = "produce", "create the topic"
	}
	return fmt.Sprintf("user %s may not %s %s: an admin can grant it with 'malachi acl grant %s %s %s'",
		sub.set.User, action, topic, sub.set.User, op, topic)
}
