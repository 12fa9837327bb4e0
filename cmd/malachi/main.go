// Command malachi is the Malachi log broker and its command-line client:
// `malachi serve` runs a node; every other subcommand talks to a node.
package main

import (
	"fmt"
	"os"
)

func main() {
	root := newRoot()
	root.SetArgs(watchIntervalArgs(os.Args[1:]))
	if err := root.Execute(); err != nil {
		// Errors quote server reasons and names: escape them like output.
		fmt.Fprintln(os.Stderr, "error:", safeText(err.Error()))
		os.Exit(exitCode(err))
	}
}
