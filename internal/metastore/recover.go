package metastore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/vfs"
)

// recovered is what Open rebuilt from disk.
type recovered struct {
	state    *metadata.State
	index    uint64   // commands folded into state
	snaps    []uint64 // snapshot indexes on disk
	log      vfs.File // the log to append to, positioned at its valid end
	logStart uint64
	logSize  int64
}

// logFile is one scanned log.
type logFile struct {
	start    uint64
	payloads [][]byte
	valid    int // bytes of whole records
	size     int // bytes in the file
}

func (l *logFile) end() uint64 { return l.start + uint64(len(l.payloads)) }

// recoverDir loads the newest snapshot that checks out and replays the logs
// after it. Every log must continue where the state stands (a gap is
// corruption); only the last one may have a torn tail, which is cut off.
func recoverDir(fs vfs.FS, dir string) (*recovered, error) {
	if err := ensureDir(fs, dir); err != nil {
		return nil, err
	}
	logs, snaps, err := dirFiles(fs, dir)
	if err != nil {
		return nil, err
	}
	rec := &recovered{snaps: snaps}
	var snapErrs error
	rec.state, rec.index, snapErrs = newestSnapshot(fs, dir, snaps)
	last, err := replay(fs, dir, rec, logs)
	if err != nil {
		return nil, errors.Join(err, snapErrs)
	}
	if err := openActive(fs, dir, rec, last); err != nil {
		return nil, err
	}
	return rec, nil
}

func ensureDir(fs vfs.FS, dir string) error {
	if _, err := fs.Stat(dir); err == nil || !vfs.IsNotExist(err) {
		return err
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return fs.SyncDir(filepath.Dir(dir))
}

// newestSnapshot tries the snapshots newest first and falls back to an
// empty state at index 0. A snapshot that fails to load is skipped, never
// deleted; its error is returned for reporting if the logs cannot make up
// for it.
func newestSnapshot(fs vfs.FS, dir string, snaps []uint64) (*metadata.State, uint64, error) {
	var errs []error
	for i := len(snaps) - 1; i >= 0; i-- {
		st, err := loadSnapshot(fs, dir, snaps[i])
		if err == nil {
			return st, snaps[i], nil
		}
		errs = append(errs, err)
	}
	return metadata.New(), 0, errors.Join(errs...)
}

// replay applies the logged commands past rec.index and returns the last
// log (nil if there is none).
func replay(fs vfs.FS, dir string, rec *recovered, logs []uint64) (*logFile, error) {
	var last *logFile
	for i, start := range logs {
		isLast := i == len(logs)-1
		if !isLast && logs[i+1] <= rec.index {
			continue // wholly covered by the state already
		}
		if start > rec.index {
			return nil, fmt.Errorf("%w: %s starts at %d but the state stops at %d", ErrCorrupt, logName(start), start, rec.index)
		}
		lf, err := scanLog(fs, dir, start)
		if err != nil {
			return nil, err
		}
		if lf.valid != lf.size && !isLast {
			return nil, fmt.Errorf("%w: %s is damaged at byte %d and is not the last log", ErrCorrupt, logName(start), lf.valid)
		}
		if err := applyLog(rec, lf); err != nil {
			return nil, err
		}
		last = lf
	}
	return last, nil
}

func scanLog(fs vfs.FS, dir string, start uint64) (*logFile, error) {
	data, err := readFile(fs, filepath.Join(dir, logName(start)))
	if err != nil {
		return nil, err
	}
	payloads, valid, err := scanRecords(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", logName(start), err)
	}
	return &logFile{start: start, payloads: payloads, valid: valid, size: len(data)}, nil
}

// applyLog applies the records of lf that the state does not hold yet. A
// logged command was accepted once, so it must be accepted again: anything
// else means the log and the state machine disagree.
func applyLog(rec *recovered, lf *logFile) error {
	for k, p := range lf.payloads {
		n := lf.start + uint64(k)
		if n < rec.index {
			continue
		}
		var cmd metadata.Command
		if err := json.Unmarshal(p, &cmd); err != nil {
			return fmt.Errorf("%w: %s record %d: %v", ErrCorrupt, logName(lf.start), k, err)
		}
		if res := rec.state.Apply(cmd); res.Err != nil {
			return fmt.Errorf("%w: %s record %d (%s) no longer applies: %v", ErrCorrupt, logName(lf.start), k, cmd.Kind, res.Err)
		}
		rec.index++
	}
	return nil
}

// openActive opens the log to append to: the last log when it ends where
// the state does (after cutting its torn tail), else a new one. The cut is
// fsynced before anything is appended after it.
func openActive(fs vfs.FS, dir string, rec *recovered, last *logFile) error {
	if last != nil && last.end() == rec.index {
		f, err := fs.OpenFile(filepath.Join(dir, logName(last.start)), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		if last.valid != last.size {
			err = f.Truncate(int64(last.valid))
			if err == nil {
				err = f.Sync()
			}
		}
		if err != nil {
			f.Close()
			return err
		}
		rec.log, rec.logStart, rec.logSize = f, last.start, int64(last.valid)
		return nil
	}
	f, err := fs.OpenFile(filepath.Join(dir, logName(rec.index)), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if err := fs.SyncDir(dir); err != nil {
		f.Close()
		return err
	}
	rec.log, rec.logStart, rec.logSize = f, rec.index, 0
	return nil
}
