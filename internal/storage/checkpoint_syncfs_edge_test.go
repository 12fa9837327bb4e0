//go:build linux

package storage

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/testenv"
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
	fl := testenv.MountFUSEMirror(t)
	s, err := Open(Config{Dir: filepath.Join(fl.Dir, "data"), JournalFileBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range manySegs {
		if err := s.Create(SegmentID(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	before := segmentFsyncs(fl.Log())
	start := s.Stats().Checkpoints
	if _, err := appendRounds(t, s, manySegs, func() bool { return s.Stats().Checkpoints >= start+2 }); err != nil {
		t.Fatal(err)
	}
	// A lookup made now is logged after every request of the
	// checkpoints that have been counted.
	_, _ = os.Stat(filepath.Join(fl.Dir, "marker"))
	fl.WaitFor(t, "LOOKUP /marker")
	if got := segmentFsyncs(fl.Log()) - before; got < manySegs {
		t.Fatalf("%d checkpoints of %d segments sent the FUSE server %d FSYNC requests for segment files: "+
			"their journal files were retired while the server had never been asked to make the segments durable",
			s.Stats().Checkpoints-start, manySegs, got)
	}
}

var (
	fuseOpened = regexp.MustCompile(`^\s+(?:create|open)\[(\d+)\] flags: \S+ (\S+)`)
	fuseFsync  = regexp.MustCompile(`^fsync\[(\d+)\]`)
)

// segmentFsyncs counts the FSYNC requests on handles of segment files in
// a bindfs debug log: which handle names which path comes from the opens.
func segmentFsyncs(text string) int {
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
