package broker

import (
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/internal/vfs"
)

// dirAction is what start-up does about a data directory open to group or
// others.
type dirAction int

const (
	dirPrivate dirAction = iota // nothing to do
	dirAllow                    // the operator allowed it: warn and go on
	dirTighten                  // ours: remove group and other access, and say so
	dirRefuse                   // not ours to change: refuse to start
)

// decideDataDir chooses what to do with a data directory of mode perm
// owned by uid, for a process running as euid.
//
// The directory holds the cluster secret that keys cursor MACs and the
// users' password hashes, so by default nobody but the node's user may
// enter it. Nodes before this check created it 0755, and an upgrade must
// not stop them from starting: a directory the process owns is tightened
// to the owner's bits, with a log line, which closes the exposure at the
// first start of this version. A directory owned by someone else the
// process cannot fix; starting anyway would serve secrets others can read,
// so it refuses, unless the operator set AllowOpenPermissions (for example
// for a backup agent in the directory's group), which leaves it as it is.
func decideDataDir(perm os.FileMode, uid, euid int, allowOpen bool) dirAction {
	switch {
	case perm&0o077 == 0:
		return dirPrivate
	case allowOpen:
		return dirAllow
	case uid == euid:
		return dirTighten
	default:
		return dirRefuse
	}
}

// checkDataDir applies decideDataDir to dir on the real filesystem.
func checkDataDir(dir string, allowOpen bool, log *slog.Logger) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("broker: data dir: %w", err)
	}
	perm := st.Mode().Perm()
	uid := -1
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		uid = int(sys.Uid)
	}
	switch decideDataDir(perm, uid, os.Geteuid(), allowOpen) {
	case dirAllow:
		log.Warn("data directory is open to group or others (AllowOpenPermissions is set); it holds the cursor key and password hashes",
			"dir", dir, "mode", perm)
	case dirTighten:
		if err := os.Chmod(dir, perm&vfs.DirMode); err != nil {
			return fmt.Errorf("broker: tighten data dir %s: %w", dir, err)
		}
		log.Warn("data directory was open to group or others; removed their access",
			"dir", dir, "from", perm, "to", perm&vfs.DirMode)
	case dirRefuse:
		return fmt.Errorf("broker: data directory %s has mode %v and belongs to uid %d, not to this process (uid %d): "+
			"it holds the cursor key and password hashes, so it must not be open to group or others; "+
			"run chmod go-rwx on it, or set AllowOpenPermissions", dir, perm, uid, os.Geteuid())
	}
	return nil
}

// warnOpenFiles logs when the process may not open as many files as the
// limits allow it to hold: one per active range (its active segment) plus
// the sealed-file cache, plus a reserve for the metadata log, listeners and
// connections. A warning, not a refusal: connections, the largest other
// user of descriptors, are the server's to bound, and a node far from its
// range limit runs fine.
func warnOpenFiles(l Limits, log *slog.Logger) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	need := uint64(l.MaxRanges) + uint64(l.MaxOpenSealedFiles) + 256
	if lim.Cur < need {
		log.Warn("the open-file limit is below what the range limit allows; raise it (ulimit -n) or lower MaxRanges",
			"limit", lim.Cur, "max_ranges", l.MaxRanges, "max_open_sealed_files", l.MaxOpenSealedFiles, "need", need)
	}
}
