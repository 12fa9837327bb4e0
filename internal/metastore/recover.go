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
	snap     uint64   // index of the snapshot loaded, 0 if none
	snaps    []uint64 // snapshot indexes on disk, up to the loaded one
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
// Everything it replays is durable when it returns.
func recoverDir(fs vfs.FS, dir string) (*recovered, error) {
	if err := vfs.EnsureDir(fs, dir); err != nil {
		return nil, err
	}
	logs, snaps, err := dirFiles(fs, dir)
	if err != nil {
		return nil, err
	}
	rec := &recovered{}
	snapErrs := newestSnapshot(fs, dir, rec, snaps)
	last, err := replay(fs, dir, rec, logs)
	if err != nil {
		return nil, errors.Join(err, snapErrs)
	}
	if err := openActive(fs, dir, rec, last); err != nil {
		return nil, err
	}
	return rec, nil
}

// newestSnapshot loads the newest snapshot that checks out into rec, or an
// empty state at index 0 if none does. A snapshot that fails to load is
// skipped, never deleted; its error is returned for reporting if the logs
// cannot make up for it. rec.snaps ends at the loaded snapshot: a damaged
// newer one must not count as one of the two snapshots rotation keeps, or
// rotation would drop the fallback that is actually needed.
func newestSnapshot(fs vfs.FS, dir string, rec *recovered, snaps []uint64) error {
	var errs []error
	for i := len(snaps) - 1; i >= 0; i-- {
		st, err := loadSnapshot(fs, dir, snaps[i])
		if err == nil {
			rec.state, rec.snap, rec.index, rec.snaps = st, snaps[i], snaps[i], snaps[:i+1]
			return nil
		}
		errs = append(errs, err)
	}
	rec.state = metadata.New()
	return errors.Join(errs...)
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
	data, err := vfs.ReadFile(fs, filepath.Join(dir, logName(start)))
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

// openActive settles the last log and opens the log to append to. After a
// kill -9 what Open replayed may sit only in the page cache: the last log's
// tail, the entry of a log created just before the kill, a snapshot's
// rename. View serves it as soon as Open returns and new commands build on
// it, so it must be durable first: the last log is cut at its torn tail and
// fsynced, and the directory fsynced, whether or not anything was cut or
// created.
func openActive(fs vfs.FS, dir string, rec *recovered, last *logFile) error {
	if last != nil {
		f, err := settleLog(fs, dir, last)
		if err != nil {
			return err
		}
		if takesAppends(last, rec.snap) {
			rec.log, rec.logStart, rec.logSize = f, last.start, int64(last.valid)
		} else if err := f.Close(); err != nil {
			return err
		}
	}
	if rec.log == nil {
		f, err := fs.OpenFile(filepath.Join(dir, logName(rec.index)), os.O_CREATE|os.O_EXCL|os.O_RDWR, vfs.FileMode)
		if err != nil {
			return err
		}
		rec.log, rec.logStart, rec.logSize = f, rec.index, 0
	}
	if err := fs.SyncDir(dir); err != nil {
		rec.log.Close()
		return err
	}
	return nil
}

// settleLog opens the last log, cuts its torn tail and fsyncs it.
func settleLog(fs vfs.FS, dir string, last *logFile) (vfs.File, error) {
	f, err := fs.OpenFile(filepath.Join(dir, logName(last.start)), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if last.valid != last.size {
		err = f.Truncate(int64(last.valid))
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// takesAppends reports whether new commands go to the last log. Not when
// it started before the snapshot and the snapshot covers all of it, as a
// crash between a snapshot's rename and the creation of its log leaves
// things: a new log then starts at the snapshot, as rotation would have
// done. A last log that already holds commands past the snapshot keeps
// taking them (collect keeps it for as long as a fallback needs it): a new
// log would start where no snapshot is, and an empty log is taken to mean
// the state is a snapshot's.
func takesAppends(last *logFile, snap uint64) bool {
	return last.start >= snap || last.end() > snap
}
