package client

import (
	"context"

	"github.com/malachi-log/malachi/internal/wire"
)

// Permissions a user may hold.
const (
	PermAdmin   = "admin"
	PermProduce = "produce"
	PermConsume = "consume"
)

// User is one user in ListUsers.
type User struct {
	Name  string
	Perms []string
}

// ACL is one grant of a user: an operation ("produce" or "consume") on a
// resource pattern, a literal topic name or a "prefix.*".
type ACL struct {
	Operation string
	Resource  string
}

// UserOptions are a new user's password and permissions.
type UserOptions struct {
	Password string
	// Perms are PermAdmin, PermProduce and PermConsume.
	Perms []string
}

// CreateUser creates the user name with opt's password and permissions.
// Admin only; ErrUserExists if the name is taken.
func (c *Client) CreateUser(ctx context.Context, name string, opt UserOptions) error {
	ps := make([]*string, len(opt.Perms))
	for i := range opt.Perms {
		ps[i] = &opt.Perms[i]
	}
	req := wire.CreateUserRequest{User: str(name), Password: str(opt.Password), Perms: ps}
	return c.do(ctx, request{req: req})
}

// DeleteUser deletes a user, its sessions and its ACLs. Admin only.
func (c *Client) DeleteUser(ctx context.Context, user string) error {
	return c.do(ctx, request{req: wire.DeleteUserRequest{User: str(user)}})
}

// ChangePassword sets a user's password. Admin only.
func (c *Client) ChangePassword(ctx context.Context, user, newPassword string) error {
	req := wire.ChangePasswordRequest{User: str(user), NewPassword: str(newPassword)}
	return c.do(ctx, request{req: req, resend: true})
}

// ListUsers lists every user with its permissions. Admin only.
func (c *Client) ListUsers(ctx context.Context) ([]User, error) {
	var resp wire.ListUsersResponse
	if err := c.do(ctx, request{req: wire.ListUsersRequest{}, resp: &resp, resend: true}); err != nil {
		return nil, err
	}
	out := make([]User, len(resp.Users))
	for i, u := range resp.Users {
		out[i] = User{Name: u.User, Perms: u.Perms}
	}
	return out, nil
}

// GrantACL lets user perform acl.Operation ("produce" or "consume") on
// topics matching acl.Resource (a literal name or "prefix.*"). Admin
// only.
func (c *Client) GrantACL(ctx context.Context, user string, acl ACL) error {
	req := wire.GrantACLRequest{User: str(user), Operation: str(acl.Operation), Pattern: str(acl.Resource)}
	return c.do(ctx, request{req: req, resend: true})
}

// RevokeACL removes a grant; revoking one that does not exist succeeds.
// Admin only.
func (c *Client) RevokeACL(ctx context.Context, user string, acl ACL) error {
	req := wire.RevokeACLRequest{User: str(user), Operation: str(acl.Operation), Pattern: str(acl.Resource)}
	return c.do(ctx, request{req: req, resend: true})
}

// ListACLs lists a user's grants. Admin only.
func (c *Client) ListACLs(ctx context.Context, user string) ([]ACL, error) {
	var resp wire.ListACLsResponse
	if err := c.do(ctx, request{req: wire.ListACLsRequest{User: str(user)}, resp: &resp, resend: true}); err != nil {
		return nil, err
	}
	out := make([]ACL, len(resp.ACLs))
	for i, a := range resp.ACLs {
		out[i] = ACL{Operation: a.Operation, Resource: a.Resource}
	}
	return out, nil
}
