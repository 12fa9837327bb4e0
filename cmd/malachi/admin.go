package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/internal/broker"
)

func newAdminCmd() *cobra.Command {
	return parentCmd("admin", "Offline maintenance of a stopped node's data directory",
		`  malachi admin reset-password --data-dir /var/lib/malachi admin`,
		newResetPasswordCmd())
}

func newResetPasswordCmd() *cobra.Command {
	var dataDir string
	var np newPassword
	cmd := &cobra.Command{
		Use:   "reset-password USER",
		Short: "Set a user's password on a stopped node (recovers a lost admin)",
		Long: `Set USER's password directly in a stopped node's data directory, for when no
administrator can log in any more (a lost or never-seen generated password).
If USER does not exist it is created with the admin permission, which brings
back an administrator after the last one was deleted; an existing user keeps
its permissions.

The node must be stopped: a running node holds the data directory's lock and
would never see the change. Anyone who can run this can read the data
directory, and so everything the node stores: it grants nothing new.`,
		Example: `  malachi admin reset-password --data-dir ./malachi-data admin
  echo "$PW" | malachi admin reset-password --data-dir /var/lib/malachi ops --new-password-stdin`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			user := args[0]
			if dataDir == "" {
				return usageErr("--data-dir is required: the data directory of the stopped node")
			}
			pass, err := np.read(cmd, "New password for "+user)
			if err != nil {
				return err
			}
			created, err := broker.ResetPassword(dataDir, user, pass)
			switch {
			case errors.Is(err, broker.ErrDataDirLocked):
				return fmt.Errorf("%s is in use by a running node: stop it first (a running node would not see the change)", dataDir)
			case errors.Is(err, broker.ErrNoDataDir):
				return fmt.Errorf("%s holds no node's data: pass the --data-dir the node was started with", dataDir)
			case errors.Is(err, broker.ErrInvalidPassword):
				return usageErr("the new password is empty or too long")
			case err != nil:
				return err
			}
			if created {
				fmt.Fprintf(cmd.OutOrStdout(), "created administrator %s in %s\n", safeText(user), safeText(dataDir))
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "changed the password of %s in %s\n", safeText(user), safeText(dataDir))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the stopped node's data directory (required)")
	np.register(cmd)
	return cmd
}
