package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

// aclModeHelp explains when grants matter; acl and serve share it.
const aclModeHelp = `ACL modes: on every node a grant ('malachi acl grant USER OPERATION PATTERN')
lets a user produce to or read the topics its pattern matches, and an admin may
do everything. By default a node is not strict: the produce and consume
permissions a user was created with ('malachi user add --perms') also cover
every topic, so a grant matters to a user without that permission. A node
started with --acl-strict (or MALACHI_ACL_STRICT=true) consults grants only: a
non-admin user produces to and reads only the topics its grants match, and
sees only those topics. No command changes an existing user's permissions;
grants are how an existing user gets access.`

func newACLCmd(a *app) *cobra.Command {
	cmd := parentCmd("acl", "Grant, revoke and list users' access to topics (admin)",
		`  malachi acl grant alice consume 'orders.*'
  malachi acl list alice
  malachi acl revoke alice consume 'orders.*'`,
		newACLChangeCmd(a, "grant"), newACLChangeCmd(a, "revoke"), newACLListCmd(a))
	cmd.Long = "Grant, revoke and list users' access to topics (admin).\n\n" + aclModeHelp
	return cmd
}

// newACLChangeCmd builds grant and revoke, which differ only in the call.
func newACLChangeCmd(a *app, verb string) *cobra.Command {
	short, done, example := "Let a user produce or consume on topics matching a pattern", "granted",
		`  malachi acl grant alice produce orders
  malachi acl grant bob consume 'orders.*'`
	if verb == "revoke" {
		short, done, example = "Take back a grant (revoking a missing one succeeds)", "revoked",
			`  malachi acl revoke bob consume 'orders.*'`
	}
	return &cobra.Command{
		Use:   verb + " USER OPERATION PATTERN",
		Short: short,
		Long: short + `.
OPERATION is produce or consume; PATTERN is a topic name or a prefix
followed by .* (quote it in the shell).

` + aclModeHelp,
		Example: example,
		Args:    exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			user, op, pattern := args[0], args[1], args[2]
			return a.run(cmd, errSubject{user: user, topic: pattern, adminOnly: true}, func(ctx context.Context, s *session) error {
				call := s.c.GrantACL
				if verb == "revoke" {
					call = s.c.RevokeACL
				}
				if err := call(ctx, user, client.ACL{Operation: op, Resource: pattern}); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"user": user, "operation": op, "pattern": pattern, done: true})
				}
				s.out.textf("%s %s %s on %s", done, user, op, pattern)
				if verb == "grant" {
					// The node does not report its mode, so the note
					// says what holds in both.
					s.out.notef("note: %s may now %s the topics matching %s, on any node; "+
						"on a node without --acl-strict its own %s permission, if it has it, also covers every topic (see 'malachi acl --help')",
						safeText(user), opVerb(op), safeText(pattern), safeText(op))
				}
				return nil
			})
		},
	}
}

// aclJSON is one grant of `acl list -o json`.
type aclJSON struct {
	Operation string `json:"operation"`
	Pattern   string `json:"pattern"`
}

func newACLListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "list USER",
		Aliases: []string{"ls"},
		Short:   "List a user's grants",
		Example: `  malachi acl list alice`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			user := args[0]
			return a.run(cmd, errSubject{user: user, adminOnly: true}, func(ctx context.Context, s *session) error {
				acls, err := s.c.ListACLs(ctx, user)
				if err != nil {
					return err
				}
				if len(acls) == 0 {
					// The node lists no grants for a user that does not
					// exist, where grant says user_not_found: answer the
					// same for the same name.
					if err := userExists(ctx, s.c, user); err != nil {
						return err
					}
				}
				docs := make([]aclJSON, len(acls))
				rows := make([][]string, len(acls))
				for i, acl := range acls {
					docs[i] = aclJSON{Operation: acl.Operation, Pattern: acl.Resource}
					rows[i] = []string{acl.Operation, acl.Resource}
				}
				if s.out.json {
					return s.out.doc(docs)
				}
				if len(rows) == 0 {
					s.out.notef("%s has no grants", user)
					return nil
				}
				return s.out.table([]string{"OPERATION", "PATTERN"}, rows)
			})
		},
	}
}

// userExists fails with user_not_found unless the node has the user.
func userExists(ctx context.Context, c *client.Client, name string) error {
	users, err := c.ListUsers(ctx)
	if err != nil {
		return err
	}
	for _, u := range users {
		if u.Name == name {
			return nil
		}
	}
	return client.ErrUserNotFound
}

// opVerb is what an ACL operation lets a user do to a topic.
func opVerb(op string) string {
	switch op {
	case "produce":
		return "produce to"
	case "consume":
		return "read"
	}
	return safeText(op) + " on"
}
