package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newUserCmd(a *app) *cobra.Command {
	return parentCmd("user", "Manage users and their permissions (admin)",
		`  malachi user add alice --password s3cret --perms produce,consume
  malachi user list`,
		newUserAddCmd(a), newUserDeleteCmd(a), newUserPasswdCmd(a), newUserListCmd(a))
}

func newUserAddCmd(a *app) *cobra.Command {
	var password string
	var perms []string
	cmd := &cobra.Command{
		Use:     "add NAME",
		Aliases: []string{"create"},
		Short:   "Create a user",
		Long: `Create a user with a password and permissions: admin, produce, consume.
produce and consume apply to every topic unless narrowed by ACLs (see
'malachi acl'). Without --password on a terminal, it asks for one.

Here --password is the new user's; your own login password comes from
MALACHI_PASSWORD or the saved context (see 'malachi context').`,
		Example: `  malachi user add alice --password s3cret --perms produce,consume
  malachi user add ops --perms admin`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			pass, err := passwordFlag(cmd, password, "Password for "+name)
			if err != nil {
				return err
			}
			return a.run(cmd, errSubject{user: name}, func(ctx context.Context, s *session) error {
				if err := s.c.CreateUser(ctx, name, pass, perms...); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"user": name, "perms": nonNil(perms), "created": true})
				}
				s.out.textf("created user %s (%s)", name, orDefault(strings.Join(perms, ","), "no permissions"))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&password, "password", "", "the new user's password (asked on a terminal if absent)")
	cmd.Flags().StringSliceVar(&perms, "perms", nil, "permissions: admin, produce, consume (comma-separated)")
	return cmd
}

// passwordFlag returns the --password given to a user command, or asks
// for one twice on a terminal. The global --password is the caller's own
// login, so this flag shadows it on these commands. An empty password is
// refused before anything is sent: it would let anyone who knows the name
// log in.
func passwordFlag(cmd *cobra.Command, value, prompt string) (string, error) {
	if cmd.Flags().Changed("password") {
		if value == "" {
			return "", errEmptyPassword
		}
		return value, nil
	}
	if !isTerminal(os.Stdin) {
		return "", usageErr("--password is required")
	}
	first, err := readSecret(cmd, prompt+": ")
	if err != nil {
		return "", err
	}
	again, err := readSecret(cmd, "Again: ")
	if err != nil {
		return "", err
	}
	if first != again {
		return "", usageErr("the passwords differ")
	}
	if first == "" {
		return "", errEmptyPassword
	}
	return first, nil
}

var errEmptyPassword = usageErr("the password may not be empty")

func readSecret(cmd *cobra.Command, prompt string) (string, error) {
	fmt.Fprint(cmd.ErrOrStderr(), prompt)
	b, err := term.ReadPassword(int(os.Stdin.Fd()))
	fmt.Fprintln(cmd.ErrOrStderr())
	return string(b), err
}

func newUserDeleteCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a user, its sessions and its ACLs",
		Example: `  malachi user delete alice`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			return a.run(cmd, errSubject{user: name}, func(ctx context.Context, s *session) error {
				if err := s.c.DeleteUser(ctx, name); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"user": name, "deleted": true})
				}
				s.out.textf("deleted user %s", name)
				return nil
			})
		},
	}
}

func newUserPasswdCmd(a *app) *cobra.Command {
	var password string
	cmd := &cobra.Command{
		Use:   "passwd NAME",
		Short: "Set a user's password",
		Long: `Set a user's password. Without --password on a terminal, it asks for one.

Here --password is the new one; your own login password comes from
MALACHI_PASSWORD or the saved context (see 'malachi context').`,
		Example: `  malachi user passwd alice --password n3w-s3cret`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			pass, err := passwordFlag(cmd, password, "New password for "+name)
			if err != nil {
				return err
			}
			return a.run(cmd, errSubject{user: name}, func(ctx context.Context, s *session) error {
				if err := s.c.ChangePassword(ctx, name, pass); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"user": name, "password_changed": true})
				}
				s.out.textf("changed the password of %s", name)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&password, "password", "", "the new password (asked on a terminal if absent)")
	return cmd
}

// userJSON is one user of `user list -o json`.
type userJSON struct {
	Name  string   `json:"name"`
	Perms []string `json:"perms"`
}

func newUserListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List users and their permissions",
		Example: `  malachi user list
  malachi user list -o json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.run(cmd, errSubject{}, func(ctx context.Context, s *session) error {
				users, err := s.c.ListUsers(ctx)
				if err != nil {
					return err
				}
				docs := make([]userJSON, len(users))
				rows := make([][]string, len(users))
				for i, u := range users {
					docs[i] = userJSON{Name: u.Name, Perms: nonNil(u.Perms)}
					rows[i] = []string{u.Name, orDefault(strings.Join(u.Perms, ","), "-")}
				}
				if s.out.json {
					return s.out.doc(docs)
				}
				return s.out.table([]string{"USER", "PERMISSIONS"}, rows)
			})
		},
	}
}
