package broker

import (
	"github.com/malachi-log/malachi/internal/audit"
	"github.com/malachi-log/malachi/internal/auth"
)

// Operations a topic permission check asks about.
const (
	OpProduce = auth.OpProduce
	OpConsume = auth.OpConsume
)

// resolve returns what id may do now: its permissions and grants from the
// current principals. It fails with ErrCredentials once id is stale: its
// user was deleted (or deleted and created again), its password changed
// since a password login, or its certificate or token expired.
func (b *Broker) resolve(id Identity) ([]string, []auth.Grant, error) {
	if !id.expires.IsZero() && !b.cfg.Clock.Now().Before(id.expires) {
		return nil, nil, ErrCredentials
	}
	p := b.authn.principal(id.User)
	if id.ownPerms {
		// The token is the authority until it expires; grants still come
		// from an account of the same name, if there is one.
		if p == nil {
			return id.Perms, nil, nil
		}
		return id.Perms, p.grants, nil
	}
	if p == nil {
		return nil, nil, ErrCredentials
	}
	gen := p.created
	if id.Method == MethodPassword {
		gen = p.cred
	}
	if gen != id.gen {
		return nil, nil, ErrCredentials
	}
	return p.perms, p.grants, nil
}

// CheckIdentity reports whether id may still make requests: nil, or
// ErrCredentials once its credentials were revoked or expired. It takes
// no lock, so the server calls it on every request.
func (b *Broker) CheckIdentity(id Identity) error {
	_, _, err := b.resolve(id)
	if err != nil {
		b.auditAs(id, audit.Revoked, "", nil, err)
	}
	return err
}

// Authorize decides whether id may perform op on topic, with its
// permissions and grants as they are now.
func (b *Broker) Authorize(id Identity, op, topic string) error {
	perms, grants, err := b.resolve(id)
	if err != nil {
		return err
	}
	if auth.Allowed(perms, grants, b.cfg.ACLStrict, op, topic) {
		return nil
	}
	b.auditAs(id, audit.PermissionDenied, topic, map[string]string{"operation": op}, ErrPermission)
	return ErrPermission
}

// RequireAdmin returns nil if id holds the admin permission now, else
// the identity's refusal or an audited ErrPermission.
func (b *Broker) RequireAdmin(id Identity, op string) error {
	perms, _, err := b.resolve(id)
	if err != nil {
		return err
	}
	if auth.HasPerm(perms, auth.PermAdmin) {
		return nil
	}
	b.auditAs(id, audit.PermissionDenied, "", map[string]string{"operation": op}, ErrPermission)
	return ErrPermission
}

// TopicFilter returns the test metadata listings apply for id: in strict
// ACL mode a non-admin sees only the topics it may produce to or consume
// from. It returns nil when id sees everything.
func (b *Broker) TopicFilter(id Identity) func(topic string) bool {
	if !b.cfg.ACLStrict {
		return nil
	}
	perms, grants, err := b.resolve(id)
	if err != nil {
		return func(string) bool { return false }
	}
	if auth.HasPerm(perms, auth.PermAdmin) {
		return nil
	}
	return func(topic string) bool { return auth.Visible(perms, grants, true, topic) }
}

// Audit records an operation id performed (or was refused) on target.
// reason is the wire reason of a refusal, "" for success.
func (b *Broker) Audit(id Identity, typ, target string, detail map[string]string, reason string) {
	ev := audit.Event{
		Time: b.cfg.Clock.Now(), Type: typ, Result: audit.ResultOK,
		Target: target, Detail: detail, Reason: reason,
	}
	if reason != "" {
		ev.Result = audit.ResultRefused
	}
	ev.User, ev.Peer, ev.Method = id.User, id.Addr, id.Method
	b.authn.audit.Record(ev)
}

func (b *Broker) auditAs(id Identity, typ, target string, detail map[string]string, err error) {
	b.Audit(id, typ, target, detail, err.Error())
}
