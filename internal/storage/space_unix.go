//go:build unix

package storage

import "syscall"

// statFree is the space an unprivileged writer may still use on the
// filesystem holding dir.
func statFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
