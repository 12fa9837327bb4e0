package broker

import "context"

// MetricsAccess decides whether cr may read the node's metrics: a login
// as the client port takes it (password, session token or JWT, with the
// same throttle, lockouts and audit), by an account holding the admin
// permission, which is what describing the cluster asks of a client.
// cr.Method is MethodPassword, MethodSession (a session token in
// cr.Token) or MethodToken (a JWT in cr.Token).
func (b *Broker) MetricsAccess(ctx context.Context, cr Credentials) error {
	var (
		id  *Identity
		err error
	)
	if cr.Method == MethodSession {
		id, err = b.Resume(cr)
	} else {
		id, err = b.Login(ctx, cr)
	}
	if err != nil {
		return err
	}
	return b.RequireAdmin(*id, "metrics")
}
