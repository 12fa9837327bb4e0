package metastore

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/vfs"
)

// File names carry a command index (the number of commands applied before
// the file's first command, or folded into the snapshot), 20 digits so they
// sort by name.
const (
	logPrefix  = "log-"
	snapPrefix = "snapshot-"
	tmpSuffix  = vfs.TempSuffix
	envFormat  = 1
)

func logName(index uint64) string  { return fmt.Sprintf("%s%020d", logPrefix, index) }
func snapName(index uint64) string { return fmt.Sprintf("%s%020d", snapPrefix, index) }

// parseName returns the index of a log or snapshot file name.
func parseName(name, prefix string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, prefix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil
}

// dirFiles lists the indexes of the logs and snapshots in dir, ascending,
// and removes leftover temporary files (snapshots that never got renamed).
func dirFiles(fs vfs.FS, dir string) (logs, snaps []uint64, err error) {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, name := range names {
		if n, ok := parseName(name, logPrefix); ok {
			logs = append(logs, n)
		} else if n, ok := parseName(name, snapPrefix); ok {
			snaps = append(snaps, n)
		} else if strings.HasSuffix(name, tmpSuffix) && strings.HasPrefix(name, snapPrefix) {
			if err := fs.Remove(filepath.Join(dir, name)); err != nil {
				return nil, nil, err
			}
		}
	}
	slices.Sort(logs)
	slices.Sort(snaps)
	return logs, snaps, nil
}

// envelope is a snapshot file's payload.
type envelope struct {
	Format int             `json:"format"`
	Index  uint64          `json:"index"`
	State  json.RawMessage `json:"state"`
}

// loadSnapshot reads and fully checks one snapshot file.
func loadSnapshot(fs vfs.FS, dir string, index uint64) (*metadata.State, error) {
	data, err := vfs.ReadFile(fs, filepath.Join(dir, snapName(index)))
	if err != nil {
		return nil, err
	}
	payload, ok := recordAt(data, 0)
	if !ok || headerLen+len(payload) != len(data) {
		return nil, fmt.Errorf("%w: snapshot %d: bad frame", ErrCorrupt, index)
	}
	var env envelope
	if err := json.Unmarshal(payload, &env); err != nil || env.Format != envFormat || env.Index != index {
		return nil, fmt.Errorf("%w: snapshot %d: bad envelope (%v)", ErrCorrupt, index, err)
	}
	st, err := metadata.Restore(env.State)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot %d: %w", ErrCorrupt, index, err)
	}
	return st, nil
}

// writeSnapshot writes the snapshot atomically (vfs.WriteFileAtomic) and
// fsyncs the directory. renamed reports whether the rename
// happened, after which a failure leaves the directory in doubt.
func writeSnapshot(fs vfs.FS, dir string, index uint64, st *metadata.State) (renamed bool, err error) {
	state, err := st.Snapshot()
	if err != nil {
		return false, err
	}
	payload, err := json.Marshal(envelope{Format: envFormat, Index: index, State: state})
	if err != nil {
		return false, err
	}
	if err := vfs.WriteFileAtomic(fs, filepath.Join(dir, snapName(index)), appendRecord(nil, payload)); err != nil {
		return false, err
	}
	return true, fs.SyncDir(dir)
}
