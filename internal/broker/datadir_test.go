package broker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDecideDataDir(t *testing.T) {
	for _, tc := range []struct {
		perm      os.FileMode
		uid, euid int
		allow     bool
		want      dirAction
	}{
		{0o700, 1, 1, false, dirPrivate},
		{0o700, 2, 1, false, dirPrivate},
		{0o755, 1, 1, false, dirTighten},
		{0o701, 1, 1, false, dirTighten}, // traversal alone reaches known paths
		{0o750, 2, 1, false, dirRefuse},
		{0o750, 2, 1, true, dirAllow},
		{0o755, 1, 1, true, dirAllow}, // allowed: left as the operator set it
	} {
		if got := decideDataDir(tc.perm, tc.uid, tc.euid, tc.allow); got != tc.want {
			t.Errorf("mode %v uid %d euid %d allow %v: %v, want %v", tc.perm, tc.uid, tc.euid, tc.allow, got, tc.want)
		}
	}
}

// openLogged opens a broker on dir with its log captured.
func openLogged(t *testing.T, cfg Config) (*Broker, *bytes.Buffer, error) {
	t.Helper()
	var log bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	b, err := Open(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { b.Close() })
	}
	return b, &log, err
}

func modeOf(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// A data directory left 0755 by an older node, owned by this process's
// user, is tightened to 0700 at start, with a log line.
func TestDataDirTightenedWhenOwned(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755) // whatever the umask
	_, log, err := openLogged(t, Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got := modeOf(t, dir); got != 0o700 {
		t.Fatalf("mode %v after start, want 0700", got)
	}
	if !strings.Contains(log.String(), "removed their access") {
		t.Fatalf("no log line about the change:\n%s", log)
	}
}

func TestDataDirAllowOpenPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o750)
	_, log, err := openLogged(t, Config{DataDir: dir, AllowOpenPermissions: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := modeOf(t, dir); got != 0o750 {
		t.Fatalf("mode %v, want the operator's 0750 left alone", got)
	}
	if !strings.Contains(log.String(), "AllowOpenPermissions") {
		t.Fatalf("no warning:\n%s", log)
	}
}

// A directory open to others and owned by another user is not ours to
// change: the node refuses to start, and changes nothing. Needs root to
// give the directory away.
func TestDataDirRefusedWhenNotOwned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown the directory to another user")
	}
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Skip("cannot chown:", err)
	}
	_, _, err := openLogged(t, Config{DataDir: dir})
	if err == nil || !strings.Contains(err.Error(), "AllowOpenPermissions") {
		t.Fatalf("Open = %v, want a refusal naming AllowOpenPermissions", err)
	}
	if got := modeOf(t, dir); got != 0o755 {
		t.Fatalf("mode %v, want it untouched", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "meta")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused start created files: %v", err)
	}
	// With the override it starts.
	if _, _, err := openLogged(t, Config{DataDir: dir, AllowOpenPermissions: true}); err != nil {
		t.Fatal(err)
	}
}
