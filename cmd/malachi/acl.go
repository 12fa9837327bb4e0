package main

import (
	"context"

	"github.com/spf13/cobra"
)

func newACLCmd(a *app) *cobra.Command {
	return parentCmd("acl", "Grant, revoke and list users' access to topics (admin)",
		`  malachi acl grant alice consume 'orders.*'
  malachi acl list alice
  malachi acl revoke alice consume 'orders.*'`,
		newACLChangeCmd(a, "grant"), newACLChangeCmd(a, "revoke"), newACLListCmd(a))
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
followed by .* (quote it in the shell).`,
		Example: example,
		Args:    exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			user, op, pattern := args[0], args[1], args[2]
			return a.run(cmd, errSubject{user: user, topic: pattern}, func(ctx context.Context, s *session) error {
				call := s.c.GrantACL
				if verb == "revoke" {
					call = s.c.RevokeACL
				}
				if err := call(ctx, user, op, pattern); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"user": user, "operation": op, "pattern": pattern, done: true})
				}
				s.out.textf("%s %s %s on %s", done, user, op, pattern)
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
			return a.run(cmd, errSubject{user: user}, func(ctx context.Context, s *session) error {
				acls, err := s.c.ListACLs(ctx, user)
				if err != nil {
					return err
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
