//go:build linux

package storage

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/testenv"
	"golang.org/x/sys/unix"
)

// A store whose data directory is on a FUSE filesystem (here bindfs, a
// mirror of a local directory) retires journal files after checkpoints
// whose one syncfs(2) never asked the FUSE server to make a segment file
// durable: the kernel's fuse_sync_fs sends nothing unless the server is
// virtiofs, and returns 0. Each retired journal file was the only durable
// copy of the batches it held, so a power loss of the server's machine
// loses acknowledged batches. Before the change each checkpoint sent the
// server one FSYNC per segment file.
func TestCheckpointOnFUSEFsyncsSegmentFiles(t *testing.T) {
	bindfs := testenv.Program(t, "bindfs", "bindfs")
	fl := mountFUSEMirror(t, bindfs)
	s, err := Open(Config{Dir: filepath.Join(fl.mnt, "data"), JournalFileBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range manySegs {
		if err := s.Create(SegmentID(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	before := fl.segmentFsyncs()
	start := s.Stats().Checkpoints
	if _, err := appendRounds(t, s, manySegs, func() bool { return s.Stats().Checkpoints >= start+2 }); err != nil {
		t.Fatal(err)
	}
	// A lookup made now is logged after every request of the
	// checkpoints that have been counted.
	_, _ = os.Stat(filepath.Join(fl.mnt, "marker"))
	fl.waitFor(t, "LOOKUP /marker")
	if got := fl.segmentFsyncs() - before; got < manySegs {
		t.Fatalf("%d checkpoints of %d segments sent the FUSE server %d FSYNC requests for segment files: "+
			"their journal files were retired while the server had never been asked to make the segments durable",
			s.Stats().Checkpoints-start, manySegs, got)
	}
}

// fuseLog is the debug output of a bindfs mount: which file handle names
// which path, and the FSYNC requests per handle.
type fuseLog struct {
	mnt string
	mu  sync.Mutex
	all strings.Builder
}

var (
	fuseOpened = regexp.MustCompile(`^\s+(?:create|open)\[(\d+)\] flags: \S+ (\S+)`)
	fuseFsync  = regexp.MustCompile(`^fsync\[(\d+)\]`)
)

func (l *fuseLog) waitFor(t *testing.T, s string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		l.mu.Lock()
		found := strings.Contains(l.all.String(), s)
		l.mu.Unlock()
		if found {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("bindfs never logged %q", s)
		}
	}
}

// segmentFsyncs counts the FSYNC requests on handles of segment files.
func (l *fuseLog) segmentFsyncs() int {
	l.mu.Lock()
	text := l.all.String()
	l.mu.Unlock()
	names := map[string]string{}
	n := 0
	for line := range strings.SplitSeq(text, "\n") {
		if m := fuseOpened.FindStringSubmatch(line); m != nil {
			names[m[1]] = m[2]
		} else if m := fuseFsync.FindStringSubmatch(line); m != nil && strings.HasSuffix(names[m[1]], logExt) {
			n++
		}
	}
	return n
}

// mountFUSEMirror mounts bindfs over a temporary directory in the
// foreground with debug output, and unmounts it at cleanup.
func mountFUSEMirror(t *testing.T, bindfs string) *fuseLog {
	t.Helper()
	src, mnt := t.TempDir(), t.TempDir()
	cmd := exec.Command(bindfs, "-f", "-d", src, mnt)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("bindfs: %v", err)
	}
	fl := &fuseLog{mnt: mnt}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fl.mu.Lock()
			fl.all.WriteString(sc.Text() + "\n")
			fl.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = exec.Command("fusermount", "-u", mnt).Run()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = cmd.Wait()
	})
	var a, b unix.Stat_t
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for unix.Stat(src, &a) != nil || unix.Stat(mnt, &b) != nil || a.Dev == b.Dev {
		select {
		case <-tick.C:
		case <-deadline:
			t.Skip("bindfs did not mount (no FUSE here?)")
		}
	}
	return fl
}
