package vfs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The real filesystem never grants group or others any access, whatever
// mode a caller asks for: a node's files hold secrets.
func TestOSPermissionsPrivate(t *testing.T) {
	old := syscall.Umask(0) // so the test sees the mode the code asks for
	defer syscall.Umask(old)
	dir := t.TempDir()
	fs := OS()
	sub := filepath.Join(dir, "a", "b")
	if err := fs.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.OpenFile(filepath.Join(sub, "f"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for path, want := range map[string]os.FileMode{
		filepath.Join(dir, "a"): DirMode, sub: DirMode, filepath.Join(sub, "f"): FileMode,
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
	if DirMode != 0o700 || FileMode != 0o600 {
		t.Fatalf("DirMode %v FileMode %v", DirMode, FileMode)
	}
}
