package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/malachi-log/malachi/pkg/client"
)

func newUserCmd(a *app) *cobra.Command {
	return parentCmd("user", "Manage users and their permissions (admin)",
		`  malachi user add alice --new-password s3cret --perms produce,consume
  malachi user list`,
		newUserAddCmd(a), newUserDeleteCmd(a), newUserPasswdCmd(a), newUserListCmd(a))
}

func newUserAddCmd(a *app) *cobra.Command {
	var np newPassword
	var perms []string
	cmd := &cobra.Command{
		Use:     "add NAME",
		Aliases: []string{"create"},
		Short:   "Create a user",
		Long: `Create a user with a password and permissions: admin, produce, consume
(--perms is required; pass it explicitly, there is no silent default).

produce and consume apply to every topic while the node runs in its default
mode; on a node started with --acl-strict a non-admin user reaches only the
topics 'malachi acl grant' gives it. No command changes an existing user's
permissions: 'malachi acl grant' gives it more topics, in either mode.

The new user's password comes from --new-password, from the first line of
standard input with --new-password-stdin, or from a prompt on a terminal.
--user and --password are always your own login.`,
		Example: `  malachi user add alice --new-password s3cret --perms produce,consume
  echo "$PW" | malachi user add ci --perms produce --new-password-stdin
  malachi user add ops --perms admin`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if len(perms) == 0 {
				return usageErr("--perms is required: admin, produce or consume, comma-separated (a user without any could only log in)")
			}
			pass, err := np.read(cmd, "Password for "+name)
			if err != nil {
				return err
			}
			return a.run(cmd, errSubject{user: name, adminOnly: true}, func(ctx context.Context, s *session) error {
				if err := s.c.CreateUser(ctx, name, client.UserOptions{Password: pass, Perms: perms}); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"user": name, "perms": nonNil(perms), "created": true})
				}
				s.out.textf("created user %s (%s)", name, strings.Join(perms, ","))
				return nil
			})
		},
	}
	np.register(cmd)
	cmd.Flags().StringSliceVar(&perms, "perms", nil, "permissions: admin, produce, consume (comma-separated; required)")
	return cmd
}

// newPassword is where a user command takes the password it sets. It
// never uses --password: that is the caller's own login, and a command
// that read it would silently give the new user the admin's password.
type newPassword struct {
	value string
	stdin bool
}

func (p *newPassword) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&p.value, "new-password", "", "the password to set (asked on a terminal if absent)")
	cmd.Flags().BoolVar(&p.stdin, "new-password-stdin", false, "read the password to set from the first line of standard input")
}

// read returns the password to set, or asks for one twice on a terminal.
// An empty password is refused before anything is sent: it would let
// anyone who knows the name log in.
func (p *newPassword) read(cmd *cobra.Command, prompt string) (string, error) {
	switch {
	case cmd.Flags().Changed("new-password") && p.stdin:
		return "", usageErr("use either --new-password or --new-password-stdin")
	case cmd.Flags().Changed("new-password"):
		if p.value == "" {
			return "", errEmptyPassword
		}
		return p.value, nil
	case p.stdin:
		line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
		if err != nil && line == "" {
			return "", usageErr("--new-password-stdin: no password on standard input")
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			return "", errEmptyPassword
		}
		return line, nil
	}
	if !isTerminal(os.Stdin) {
		return "", usageErr("--new-password or --new-password-stdin is required when standard input is not a terminal (--password is your own login)")
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
			return a.run(cmd, errSubject{user: name, adminOnly: true}, func(ctx context.Context, s *session) error {
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
	var np newPassword
	cmd := &cobra.Command{
		Use:   "passwd NAME",
		Short: "Set a user's password",
		Long: `Set a user's password: --new-password, the first line of standard input with
--new-password-stdin, or a prompt on a terminal. --user and --password are
always your own login.`,
		Example: `  malachi user passwd alice --new-password n3w-s3cret
  malachi user passwd alice            # asks twice on a terminal`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			pass, err := np.read(cmd, "New password for "+name)
			if err != nil {
				return err
			}
			return a.run(cmd, errSubject{user: name, adminOnly: true}, func(ctx context.Context, s *session) error {
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
	np.register(cmd)
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
			return a.run(cmd, errSubject{adminOnly: true}, func(ctx context.Context, s *session) error {
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
