package vfs

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// newFilesSyncer opens dir once, so that its syncfs(2) reports every
// write-back error of the filesystem from now on (Linux 5.8 and later
// keep one error sequence per filesystem and per open file; until 5.17
// syncfs dropped the error of the filesystem's own sync, its journal
// commit, so earlier kernels sync each file). Only filesystems whose
// syncfs makes every file's data durable take the one call: on FUSE, for
// one, syncfs writes dirty pages to the server but never asks it to
// fsync, where each file's fdatasync does.
func (osFS) newFilesSyncer(dir string, minFiles int) (FilesSyncer, error) {
	if minFiles < 0 || !syncfsReportsErrors() {
		return eachSyncer{}, nil
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil || !syncfsFlushes[int64(fs.Type)] {
		_ = unix.Close(fd)
		return eachSyncer{}, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: dir, Err: err}
	}
	return &syncfsSyncer{dir: dir, fd: fd, dev: st.Dev, minFiles: minFiles}, nil
}

// syncfsSyncer makes a large batch durable with one syncfs on a
// directory it holds open, and a small one file by file.
type syncfsSyncer struct {
	dir      string
	dev      uint64
	minFiles int

	mu sync.Mutex // guards fd against Close
	fd int        // -1 once closed
}

func (s *syncfsSyncer) SyncFiles(files []File) (int, error) {
	if len(files) < s.minFiles {
		return SyncEach(files)
	}
	// A file on another filesystem (a mount inside the directory) is not
	// covered by this one's sync.
	var apart []File
	same := 0
	for _, f := range files {
		if s.onDevice(f) {
			same++
		} else {
			apart = append(apart, f)
		}
	}
	if same < s.minFiles {
		return SyncEach(files)
	}
	n, err := SyncEach(apart)
	if err != nil {
		return n, err
	}
	return n + 1, s.syncfs()
}

// onDevice reports whether f is an OS file on the syncer's filesystem.
func (s *syncfsSyncer) onDevice(f File) bool {
	of, ok := f.(osFile)
	if !ok {
		return false
	}
	var st unix.Stat_t
	return unix.Fstat(int(of.Fd()), &st) == nil && st.Dev == s.dev
}

func (s *syncfsSyncer) syncfs() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return &os.PathError{Op: "syncfs", Path: s.dir, Err: os.ErrClosed}
	}
	for {
		_, _, errno := unix.Syscall(unix.SYS_SYNCFS, uintptr(s.fd), 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return &os.PathError{Op: "syncfs", Path: s.dir, Err: errno}
		}
		return nil
	}
}

func (s *syncfsSyncer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	if err != nil {
		return &os.PathError{Op: "close", Path: s.dir, Err: err}
	}
	return nil
}

// syncfsFlushes are the filesystems (statfs f_type) whose syncfs writes
// back every dirty file and commits their journal or log, so that it
// stands for an fdatasync of each: ext2/3/4, XFS and btrfs.
var syncfsFlushes = map[int64]bool{
	unix.EXT4_SUPER_MAGIC:  true,
	unix.XFS_SUPER_MAGIC:   true,
	unix.BTRFS_SUPER_MAGIC: true,
}

// syncfsReportsErrors reports whether the kernel is 5.17 or later, the
// first whose syncfs returns both write-back errors (5.8) and the
// filesystem's own sync errors (5.17).
func syncfsReportsErrors() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	major, minor, ok := kernelVersion(unix.ByteSliceToString(u.Release[:]))
	return ok && (major > 5 || major == 5 && minor >= 17)
}

// kernelVersion parses the major and minor numbers of a release string
// such as "6.1.0-18-amd64".
func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	end := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		parts[1] = parts[1][:end]
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}
