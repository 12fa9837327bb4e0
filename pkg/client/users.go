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

// CreateUser creates a user with a password and permissions (PermAdmin,
// PermProduce, PermConsume). Admin only; ErrUserExists if the name is
// taken.
func (c *Client) CreateUser(ctx context.Context, user, password string, perms ...string) error {
	ps := make([]*string, len(perms))
	for i := range perms {
		ps[i] = &perms[i]
	}
	req := wire.CreateUserRequest{User: str(user), Password: str(password), Perms: ps}
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

// GrantACL lets user perform operation ("produce" or "consume") on topics
// matching pattern (a literal name or "prefix.*"). Admin only.
func (c *Client) GrantACL(ctx context.Context, user, operation, pattern string) error {
	req := wire.GrantACLRequest{User: str(user), Operation: str(operation), Pattern: str(pattern)}
	return c.do(ctx, request{req: req, resend: true})
}

// RevokeACL removes a grant; revoking one that does not exist succeeds.
// Admin only.
func (c *Client) RevokeACL(ctx context.Context, user, operation, pattern string) error {
	req := wire.RevokeACLRequest{User: str(user), Operation: str(operation), Pattern: str(pattern)}
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
