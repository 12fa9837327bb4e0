package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal asks the kernel to send the node SIGTERM should
// dev itself die without stopping it (SIGKILL), so no node outlives it.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
