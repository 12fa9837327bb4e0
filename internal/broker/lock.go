package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/malachi-log/malachi/internal/vfs"
)

// ErrDataDirLocked means another process serves the data directory.
var ErrDataDirLocked = errors.New("broker: data directory is in use by another process")

// lockDataDir takes an exclusive advisory lock on dir/LOCK so two nodes
// can never write the same segments and metadata log. The lock dies with
// the process, so a SIGKILL never leaves it behind.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, vfs.FileMode)
	if err != nil {
		return nil, fmt.Errorf("broker: lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrDataDirLocked, dir)
		}
		return nil, fmt.Errorf("broker: lock %s: %w", dir, err)
	}
	return f, nil
}
