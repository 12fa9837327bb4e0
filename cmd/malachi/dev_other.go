//go:build !linux

package main

import "os/exec"

// setParentDeathSignal has no portable equivalent: elsewhere, nodes of a
// dev that was killed outright must be stopped by hand.
func setParentDeathSignal(*exec.Cmd) {}
