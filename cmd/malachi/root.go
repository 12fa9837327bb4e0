package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "malachi",
		Short:         "Malachi: a log broker of topics, keys and opaque cursors",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCmd())
	root.AddCommand(newDevCertsCmd())
	root.AddCommand(newDevCmd())
	addClientCommands(root)
	return root
}
