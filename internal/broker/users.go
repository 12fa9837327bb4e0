package broker

import (
	"context"
	"runtime/debug"
	"sort"

	"github.com/malachi-log/malachi/internal/auth"
	"github.com/malachi-log/malachi/internal/metadata"
)

// CreateUser adds a user with an argon2id-hashed password.
func (b *Broker) CreateUser(ctx context.Context, user, password string, perms []string) error {
	if !auth.ValidPerms(perms) {
		return metadata.ErrInvalidPermissions
	}
	if !validPassword(password) {
		return ErrInvalidPassword
	}
	hash, err := auth.HashPassword(password)
	if err != nil {
		return err
	}
	_, err = b.apply(ctx, metadata.Command{Kind: "create_user", User: user, PasswordHash: hash, Perms: perms})
	b.refreshPrincipals()
	return err
}

// DeleteUser removes a user, its ACLs and its sessions. Connections
// already open as the user are refused from their next request. The last
// user with the admin permission is refused (last_admin): without one
// nothing can be administered until an offline ResetPassword.
func (b *Broker) DeleteUser(ctx context.Context, user string) error {
	_, err := b.apply(ctx, metadata.Command{Kind: "delete_user", User: user, KeepAdmin: true})
	b.refreshPrincipals()
	if err != nil {
		return err
	}
	return nil
}

// ChangePassword replaces a user's password. Its sessions end, and
// connections that logged in with the old password are refused from their
// next request.
func (b *Broker) ChangePassword(ctx context.Context, user, password string) error {
	if !validPassword(password) {
		return ErrInvalidPassword
	}
	hash, err := auth.HashPassword(password)
	if err != nil {
		return err
	}
	_, err = b.apply(ctx, metadata.Command{Kind: "set_password", User: user, PasswordHash: hash})
	b.refreshPrincipals()
	if err != nil {
		return err
	}
	return nil
}

// UserEntry is one user and its permissions.
type UserEntry struct {
	User  string
	Perms []string
}

// ListUsers returns every user, sorted by name.
func (b *Broker) ListUsers() []UserEntry {
	var out []UserEntry
	_ = b.plane.ViewRoot(func(st *metadata.State) {
		for _, u := range st.Users() {
			out = append(out, UserEntry{User: u.Name, Perms: u.Perms})
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].User < out[j].User })
	return out
}

// GrantACL allows user to perform operation on topics matching pattern.
func (b *Broker) GrantACL(ctx context.Context, user, operation, pattern string) error {
	_, err := b.apply(ctx, metadata.Command{Kind: "grant_acl", User: user, Operation: operation, Pattern: pattern})
	b.refreshPrincipals()
	return err
}

// RevokeACL removes a grant; revoking a missing grant succeeds. It takes
// effect on the user's open connections from their next request.
func (b *Broker) RevokeACL(ctx context.Context, user, operation, pattern string) error {
	_, err := b.apply(ctx, metadata.Command{Kind: "revoke_acl", User: user, Operation: operation, Pattern: pattern})
	b.refreshPrincipals()
	return err
}

// ACLEntry is one grant.
type ACLEntry struct{ Operation, Resource string }

// ListACLs returns a user's grants.
func (b *Broker) ListACLs(user string) []ACLEntry {
	var out []ACLEntry
	_ = b.plane.ViewRoot(func(st *metadata.State) {
		for _, a := range st.ACLs(user) {
			out = append(out, ACLEntry{Operation: a.Operation, Resource: a.Pattern})
		}
	})
	return out
}

// DevUsers are the development accounts of the original system.
var DevUsers = []struct {
	User, Password string
	Perms          []string
}{
	{"admin", "admin123", []string{"admin"}},
	{"producer", "producer123", []string{"produce"}},
	{"consumer", "consumer123", []string{"consume"}},
	{"app", "app123", []string{"produce", "consume"}},
}

// SeedUsers gives a node without users its first accounts: the
// development users with dev, otherwise an admin whose password is
// adminPassword or, when empty, generated and returned so the caller can
// print it once. A node that already has users is left alone.
func (b *Broker) SeedUsers(ctx context.Context, dev bool, adminPassword string) (generated string, err error) {
	var n int
	_ = b.plane.ViewRoot(func(st *metadata.State) { n = len(st.Users()) })
	if n > 0 {
		return "", nil
	}
	// Hashing is memory-hard: give the hashing buffers back to the OS
	// rather than let a node's resting footprint carry them.
	defer debug.FreeOSMemory()
	if dev {
		for _, u := range DevUsers {
			if err := b.CreateUser(ctx, u.User, u.Password, u.Perms); err != nil {
				return "", err
			}
		}
		return "", nil
	}
	if adminPassword == "" {
		adminPassword = auth.GeneratePassword()
		generated = adminPassword
	}
	return generated, b.CreateUser(ctx, "admin", adminPassword, []string{auth.PermAdmin})
}

// MaxPasswordLen bounds a new password: longer ones protect nothing more
// and only make every later login hash more bytes.
const MaxPasswordLen = 1024

func validPassword(p string) bool { return p != "" && len(p) <= MaxPasswordLen }
