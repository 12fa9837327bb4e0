package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// Replay of the node journal at Open, in two passes over its files.
//
// The first pass (scanJournal) validates every round and learns, per
// segment, where the journal's part of it begins: the file position of its
// first batch after its last tombstone. Everything before that position
// was fsynced by a checkpoint; everything after it may be torn, even in
// pages that reached the disk out of order, so recovery cuts the file
// there (segment.RecoverCut) and the second pass (replay) appends the
// journal's batches again, checking each lands exactly where it was
// journaled. The journal is deleted only after the replayed segments are
// fsynced; a crash before that replays it again, to the same result.
//
// A cut record (Truncate) voids the batches journaled before it at or
// above its file position: the second pass skips them, so a cut batch
// never comes back. The first pass also lowers the segment's cut to the
// record's position, since a cut may reach below what the journal holds
// of the segment, into what a checkpoint fsynced; the file may or may not
// have been cut when the crash came, and it is cut there either way.
//
// The journal never silently loses a batch: damage inside it (an invalid
// round followed by a valid later one) fails Open, and batches it cannot
// place (a segment's file missing without a tombstone, or damaged) leave
// the journal moved into QuarantineDir and the segment reported damaged.

// jfile is one journal file found at Open.
type jfile struct {
	path string
	seq  uint64
	end  int64 // end of the file's rounds
}

// journalPlan is what the first pass learned.
type journalPlan struct {
	files    []jfile
	cuts     map[SegmentID]int64  // see above
	creates  map[SegmentID]bool   // created (after their last tombstone) in the journal
	lastTomb map[SegmentID]uint64 // index of the segment's last tombstone record
	ends     map[SegmentID]uint64 // offset after the segment's last journaled batch
	// shrinks lists, per segment, its cut records after its last
	// tombstone, in journal order.
	shrinks   map[SegmentID][]shrink
	nextSeq   uint64
	nextRound uint64
	started   bool     // a file header was read: rounds must follow on
	spares    []string // checkpointed files kept for recycling
}

func (s *Store) journalPath() string { return filepath.Join(s.cfg.Dir, journalDir) }

// shrink is a cut record: the k-th record, cutting the file at pos.
// lowest is the lowest position of this cut and every later cut of the
// segment (filled in once the first pass is done).
type shrink struct {
	k      uint64
	pos    int64
	lowest int64
}

// settleShrinks fills in each cut's lowest, from the last cut back.
func (p *journalPlan) settleShrinks() {
	for _, cs := range p.shrinks {
		for i := len(cs) - 1; i >= 0; i-- {
			cs[i].lowest = cs[i].pos
			if i+1 < len(cs) {
				cs[i].lowest = min(cs[i].pos, cs[i+1].lowest)
			}
		}
	}
}

// voided reports whether the batch of record k, journaled at file
// position pos, was dropped by a later cut of its segment: one whose
// position is at or below pos. The second pass asks in record order, so
// next, the segment's first cut after the record, only moves forward,
// and the replay takes time linear in the journal's records.
func (r *replayer) voided(id SegmentID, k uint64, pos int64) bool {
	cs := r.p.shrinks[id]
	i := r.nextCut[id]
	for i < len(cs) && cs[i].k < k {
		i++
	}
	if i > 0 {
		r.nextCut[id] = i
	}
	return i < len(cs) && cs[i].lowest <= pos
}

// scanJournal is the first pass.
func (s *Store) scanJournal() (*journalPlan, error) {
	p := &journalPlan{cuts: map[SegmentID]int64{}, creates: map[SegmentID]bool{},
		lastTomb: map[SegmentID]uint64{}, ends: map[SegmentID]uint64{}, shrinks: map[SegmentID][]shrink{}}
	names, err := s.fs.ReadDir(s.journalPath())
	if vfs.IsNotExist(err) {
		return p, nil
	}
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		path := filepath.Join(s.journalPath(), name)
		switch seq, ok := parseJournalName(name); {
		case ok:
			p.files = append(p.files, jfile{path: path, seq: seq})
		case strings.HasPrefix(name, spareName) && strings.HasSuffix(name, journalExt):
			p.spares = append(p.spares, path)
		}
	}
	sort.Slice(p.files, func(i, j int) bool { return p.files[i].seq < p.files[j].seq })
	var k uint64 // record index across files
	for i := range p.files {
		f := &p.files[i]
		err := s.eachRound(f, i == len(p.files)-1, p, func(body []byte) error {
			return eachRecord(body, func(r jrecord) error {
				p.note(r, k)
				k++
				return nil
			})
		})
		if err != nil {
			return nil, err
		}
		p.nextSeq = f.seq + 1
	}
	p.settleShrinks()
	return p, nil
}

// note records what the first pass needs of record r, the k-th.
func (p *journalPlan) note(r jrecord, k uint64) {
	switch r.kind {
	case recTomb:
		p.lastTomb[r.id] = k
		delete(p.cuts, r.id)
		delete(p.ends, r.id)
		delete(p.creates, r.id)
		delete(p.shrinks, r.id)
		return
	case recCreate:
		p.creates[r.id] = true
		return
	}
	// Batches follow on in the file or start where a cut left it, so
	// the lowest position of the two kinds is where the journal's part
	// begins.
	if c, ok := p.cuts[r.id]; !ok || r.pos < c {
		p.cuts[r.id] = r.pos
	}
	if r.kind == recCut {
		p.shrinks[r.id] = append(p.shrinks[r.id], shrink{k: k, pos: r.pos})
		p.ends[r.id] = binary.LittleEndian.Uint64(r.batch)
		return
	}
	if h, err := segment.ParseHeader(r.batch); err == nil {
		p.ends[r.id] = h.LastOffset() + 1
	}
}

// eachRound reads journal file f and calls fn with the body of each of its
// rounds, in order: those carrying the file's salt and numbered on from its
// first round; the first that does not ends the file. A file's first round
// must follow on from the previous file's last, which also proves a file
// before the last was not cut short. After the last file's rounds, a
// valid round of the same file means damage, not a torn tail.
func (s *Store) eachRound(f *jfile, last bool, p *journalPlan, fn func([]byte) error) error {
	b, err := vfs.ReadFile(s.fs, f.path)
	if err != nil {
		return err
	}
	h, herr := parseJournalHeader(b)
	switch {
	case herr != nil && last && len(b) <= journalHeaderLen:
		f.end = 0 // a file whose creation a crash interrupted: holds nothing
		return nil
	case herr != nil:
		return fmt.Errorf("journal %s: %w", f.path, herr)
	case h.seq != f.seq:
		return fmt.Errorf("%w: journal %s names file %d", ErrCorrupt, f.path, h.seq)
	case p.started && h.firstRound != p.nextRound:
		return fmt.Errorf("%w: journal %s starts at round %d, round %d expected (rounds are missing)",
			ErrCorrupt, f.path, h.firstRound, p.nextRound)
	}
	pos, want := int64(journalHeaderLen), h.firstRound
	for pos < int64(len(b)) {
		rseq, body, err := parseRound(b[pos:], h.salt)
		if err != nil {
			break
		}
		if rseq != want {
			return fmt.Errorf("%w: journal %s byte %d: round %d, round %d expected", ErrCorrupt, f.path, pos, rseq, want)
		}
		if err := fn(body); err != nil {
			return err
		}
		pos += int64(roundHeaderLen + len(body))
		want++
	}
	f.end, p.nextRound, p.started = pos, want, true
	if last {
		return damageAfter(f.path, b, pos, h.salt)
	}
	return nil
}

// damageAfter reports a round of this file (its salt) after pos, where
// its rounds ended: an invalid round followed by a valid one is damage.
func damageAfter(path string, b []byte, pos int64, salt uint64) error {
	for q := pos + 1; q < int64(len(b)); q++ {
		i := bytes.Index(b[q:], []byte(roundMagic))
		if i < 0 {
			return nil
		}
		q += int64(i)
		if rseq, _, err := parseRound(b[q:], salt); err == nil {
			return fmt.Errorf("%w: journal %s: invalid round at byte %d followed by valid round %d at byte %d",
				ErrCorrupt, path, pos, rseq, q)
		}
	}
	return nil
}

// replayer is the second pass's state.
type replayer struct {
	s       *Store
	p       *journalPlan
	k       uint64
	touched map[*seg]struct{}
	orphans map[SegmentID]int // batches for segments whose file is missing
	// unplaced counts, per damaged segment, batches it could not take.
	unplaced map[*seg]int
	// stale holds sealed copies the journal shows are not the copy it
	// created (refuseStale); checked, those whose first journaled batch
	// was compared with the file (checkSealed).
	stale, checked map[*seg]bool
	// nextCut is, per segment, the index in p.shrinks of its first cut
	// not before the record being replayed (see voided).
	nextCut map[SegmentID]int
	// A replay a full disk stopped goes on later from where it stopped
	// (replay_wait.go): file is the first journal file not done, fileK
	// the index of its first record, done the number of records done.
	file        int
	fileK, done uint64
}

func newReplayer(s *Store, p *journalPlan) *replayer {
	return &replayer{s: s, p: p, touched: map[*seg]struct{}{}, orphans: map[SegmentID]int{},
		unplaced: map[*seg]int{}, nextCut: map[SegmentID]int{}, stale: map[*seg]bool{}, checked: map[*seg]bool{}}
}

// refuseStale reports sealed copy sg damaged: the journal created the
// segment after its last tombstone, so the copy it holds batches of was
// made then, and the sealed copy on disk is not that one. A removal of an
// older copy that a power loss undid brings such a copy back. Neither is
// taken for the other: the sealed copy is kept but served to no one, and
// the journal's batches are kept in QuarantineDir with the journal, for
// the copy to be repaired from its replicas.
func (r *replayer) refuseStale(sg *seg, why string) {
	sg.damage = fmt.Errorf("%w: segment %d: %s", ErrCorrupt, sg.id, why)
	sg.fenced = true
	sg.endPastDamage = max(sg.queuedEnd, r.p.ends[sg.id])
	r.stale[sg] = true
	r.unplaced[sg] += 0 // reported even if no batch of it follows
}

// checkSealed compares the first batch the journal holds of a sealed copy
// it created with the file's bytes at that position: the copy it created
// holds every batch journaled before its seal, so bytes that differ mean
// the file is another copy (refuseStale). A batch past the file's data
// proves nothing (a seal at an exact end may have cut it off) and the
// bytes are read once per segment, so a replay costs one small read for
// each sealed copy created in the journal.
func (r *replayer) checkSealed(sg *seg, rec jrecord) error {
	end := int64(segment.FileHeaderSize) + int64(sg.footer.Bytes)
	if rec.pos+int64(len(rec.batch)) > end {
		return nil
	}
	f, err := r.s.fs.OpenFile(r.s.path(sg.id, logExt), os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	got := make([]byte, len(rec.batch))
	if n, err := f.ReadAt(got, rec.pos); n < len(got) {
		return fmt.Errorf("segment %d: %w", sg.id, err)
	}
	if !bytes.Equal(got, rec.batch) {
		r.refuseStale(sg, fmt.Sprintf("the journal created it and holds a batch at byte %d, but the sealed copy on disk holds other bytes there", rec.pos))
	}
	return nil
}

// run is the second pass; it ends with the journal retired (or
// quarantined) and everything it held durable in the segment files. An
// error wrapping errOpenWaits (a full disk) leaves the journal as it is
// and what was replayed so far durable; run may then be called again
// and goes on from the record that found the disk full.
func (r *replayer) run() error {
	s, p := r.s, r.p
	if len(p.files) == 0 {
		return nil
	}
	for ; r.file < len(p.files); r.file++ {
		f := p.files[r.file]
		r.k = r.fileK
		err := s.eachRound(&f, r.file == len(p.files)-1, &journalPlan{}, func(body []byte) error {
			return eachRecord(body, r.next)
		})
		if errors.Is(err, errOpenWaits) {
			// What was replayed before it becomes durable and readable.
			if serr := r.syncTouched(); serr != nil {
				return serr
			}
			return err
		}
		if err == nil {
			err = r.syncTouched() // also lets go of this file's bytes
		}
		if err != nil {
			return err
		}
		r.fileK = r.k
	}
	var err error
	if len(r.orphans) > 0 || len(r.unplaced) > 0 {
		if err = s.markDamage(r); err == nil {
			err = s.quarantineJournal(p.files)
		}
	} else {
		err = s.retireReplayed(p)
	}
	if isNoSpace(err) {
		return waitSpace(err)
	}
	return err
}

// next replays the next record unless an earlier run did.
func (r *replayer) next(rec jrecord) error {
	k := r.k
	r.k++
	if k < r.done {
		return nil
	}
	if err := r.apply(rec, k); err != nil {
		return err
	}
	r.done = k + 1
	return nil
}

// syncTouched fsyncs the segments replayed into so far.
func (r *replayer) syncTouched() error {
	for sg := range r.touched {
		if err := sg.h.log.Sync(); err != nil {
			return err
		}
		w, _ := sg.h.log.Stats()
		sg.queuedEnd = max(sg.queuedEnd, w.End) // kept when raised to the journal's (replay_wait.go)
	}
	clear(r.touched)
	return nil
}

// retireReplayed keeps the first replayed file as the spare and deletes
// the rest.
func (s *Store) retireReplayed(p *journalPlan) error {
	for _, f := range p.files {
		var err error
		if len(p.spares) == 0 {
			spare := sparePath(s.journalPath(), f.seq)
			err = s.fs.Rename(f.path, spare)
			p.spares = append(p.spares, spare)
		} else {
			err = s.fs.Remove(f.path)
		}
		if err != nil && !vfs.IsNotExist(err) { // gone: an earlier run stopped after it
			return err
		}
	}
	return s.fs.SyncDir(s.journalPath())
}

// apply replays record rec, the k-th. A full disk is not damage: the
// segment cut what the write tore off, so the record may be applied
// again, and the error wraps errOpenWaits.
func (r *replayer) apply(rec jrecord, k uint64) error {
	if t, ok := r.p.lastTomb[rec.id]; (ok && k <= t) || rec.kind == recTomb || rec.kind == recCut {
		return nil
	}
	if rec.kind == recBatch && r.voided(rec.id, k, rec.pos) {
		return nil // a later cut dropped it
	}
	sg := r.s.segs[rec.id]
	if rec.kind == recCreate {
		if sg != nil && sg.sealed && sg.damage == nil && sg.base != uint64(rec.pos) {
			r.refuseStale(sg, fmt.Sprintf("the journal creates it at base %d, but the sealed copy on disk has base %d", rec.pos, sg.base))
		}
		if sg != nil {
			return nil // sealed since, or marked damaged: its file stands
		}
		err := r.s.recreate(rec)
		if isNoSpace(err) {
			return waitSpace(err)
		}
		return err
	}
	switch {
	case sg == nil:
		r.orphans[rec.id]++
		return nil
	case r.stale[sg]:
		r.unplaced[sg]++
		return nil
	case sg.sealed && sg.damage == nil && sg.footer != nil && r.p.creates[rec.id] && !r.checked[sg]:
		r.checked[sg] = true
		if err := r.checkSealed(sg, rec); err != nil {
			return err
		}
		if r.stale[sg] {
			r.unplaced[sg]++
		}
		return nil
	case sg.sealed:
		return nil // a seal fsyncs the file first: it holds the batch
	case sg.damage != nil || sg.h == nil:
		sg.endPastDamage = max(sg.endPastDamage, r.p.ends[rec.id])
		r.unplaced[sg]++
		return nil
	}
	log := sg.h.log
	if at := log.WriteEnd(); at != rec.pos {
		sg.damage = fmt.Errorf("%w: segment %d: the journal places a batch at byte %d, the file ends at byte %d",
			ErrCorrupt, sg.id, rec.pos, at)
		sg.fenced = true
		w, _ := log.Stats()
		sg.endPastDamage = max(w.End, r.p.ends[rec.id])
		r.unplaced[sg]++
		return nil
	}
	if _, err := checkBatch(rec.batch); err != nil {
		return fmt.Errorf("journal batch for segment %d: %w", sg.id, err)
	}
	if err := log.Append(rec.batch); err != nil {
		if isNoSpace(err) && log.Err() == nil {
			return waitSpace(err)
		}
		return err
	}
	r.touched[sg] = struct{}{}
	r.s.stats.replayed.Add(1)
	return nil
}

// recreate makes, afresh, the file of a segment whose creation the
// journal holds: nothing of it was checkpointed (the journal file holding
// the record would be gone), so whatever a crash left of its file is
// replaced by the journal's batches, appended next.
//
// Only the .log and its index cache are replaced. The copy's markers
// describe the copy, not its bytes, and outlive the rebuild: a fence
// marker was written after the create record was durable, so it is this
// copy's (CreateFor made the removal of a predecessor's durable first),
// and dropping it would let the copy take appends again at the next
// restart, after restoreFences latched it only in memory (W4, W6). A
// .seal or a .damage is never here: recoverAll routes a segment with
// either to recoverSealed or recoverMarked, and apply skips the create of
// a segment it already holds.
func (s *Store) recreate(rec jrecord) error {
	if len(rec.batch) != 4 {
		return fmt.Errorf("%w: journal create record of %d bytes", ErrCorrupt, len(rec.batch))
	}
	owner := binary.LittleEndian.Uint32(rec.batch)
	s.noteID(rec.id)
	log, err := s.reuseCreated(rec.id, uint64(rec.pos), owner)
	if err != nil {
		return err
	}
	if log == nil {
		for _, ext := range []string{logExt, idxExt} {
			if err := s.fs.Remove(s.path(rec.id, ext)); err != nil && !vfs.IsNotExist(err) {
				return err
			}
		}
		if log, err = s.createFiles(rec.id, uint64(rec.pos), owner, true); err != nil {
			return err
		}
	}
	s.segs[rec.id] = &seg{id: rec.id, base: uint64(rec.pos), ready: true, queuedEnd: uint64(rec.pos),
		h: &handle{log: log, refs: 1}}
	return nil
}

// reuseCreated returns the file a journaled create left, cut back to its
// header, when that header is whole and names the segment the record
// creates: the same file a new create makes, but made without a write,
// which a full disk may refuse. nil when there is no such file; recreate
// then makes a new one. The index cache goes either way.
func (s *Store) reuseCreated(id SegmentID, base uint64, owner uint32) (*segment.Segment, error) {
	path := s.path(id, logExt)
	if _, err := s.fs.Stat(path); err != nil {
		return nil, nil // missing, or unreadable: recreate tells
	}
	log, rec, err := segment.RecoverCut(s.fs, path, s.opts, segment.FileHeaderSize)
	if err != nil {
		return nil, nil
	}
	if rec.Damage != nil || log.ID() != uint64(id) || log.Base() != base || log.Owner() != owner {
		_ = log.Close()
		return nil, nil
	}
	err = s.fs.Remove(s.path(id, idxExt))
	if err == nil || vfs.IsNotExist(err) {
		err = s.fs.SyncDir(s.cfg.Dir) // the file's entry may be the create's, never synced
	}
	if err != nil {
		_ = log.Close()
		return nil, err
	}
	return log, nil
}

// markDamage records, durably, the damage the replay found, before the
// journal that showed it is moved away: each segment that could not take
// its journaled batches, and each whose file is missing, gets a damage
// marker (<id>.damage) that every later Open honours, so its files are
// never cut or appended to as if nothing had happened.
func (s *Store) markDamage(r *replayer) error {
	for sg, n := range r.unplaced {
		reason := fmt.Sprintf("%v; %d journaled batches it could not take are kept in %s", sg.damage, n, QuarantineDir)
		if err := writeDamageMarker(s.fs, s.path(sg.id, damageExt), sg.endPastDamage, reason); err != nil {
			return err
		}
	}
	for id, n := range r.orphans {
		s.noteID(id)
		reason := fmt.Sprintf("the journal holds %d batches of it but its file is missing; they are kept in %s", n, QuarantineDir)
		if err := writeDamageMarker(s.fs, s.path(id, damageExt), r.p.ends[id], reason); err != nil {
			return err
		}
		s.segs[id] = &seg{id: id, ready: true, fenced: true, endPastDamage: r.p.ends[id],
			damage: fmt.Errorf("%w: segment %d: %s", ErrCorrupt, id, reason)}
	}
	return s.fs.SyncDir(s.cfg.Dir)
}

// A damage marker: the end past the damage (decimal), a newline, the reason.
func writeDamageMarker(fs vfs.FS, path string, end uint64, reason string) error {
	return segment.WriteFileAtomic(fs, path, []byte(strconv.FormatUint(end, 10)+"\n"+reason))
}

func readDamageMarker(fs vfs.FS, path string) (end uint64, reason string, err error) {
	b, err := vfs.ReadFile(fs, path)
	if err != nil {
		return 0, "", err
	}
	first, rest, _ := strings.Cut(string(b), "\n")
	end, perr := strconv.ParseUint(first, 10, 64)
	if perr != nil {
		return 0, "damaged (unreadable damage marker)", nil
	}
	return end, rest, nil
}

// quarantineJournal moves the journal's files into QuarantineDir instead of
// deleting them, because they hold batches no segment file took.
func (s *Store) quarantineJournal(files []jfile) error {
	qdir := filepath.Join(s.cfg.Dir, QuarantineDir)
	if err := s.fs.MkdirAll(qdir, vfs.DirMode); err != nil {
		return err
	}
	if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
		return err
	}
	for _, f := range files {
		dst, err := freeName(s.fs, qdir, "journal-"+strings.TrimSuffix(filepath.Base(f.path), journalExt), journalExt)
		if err != nil {
			return err
		}
		if err := s.fs.Rename(f.path, dst); err != nil && !vfs.IsNotExist(err) { // moved by an earlier run
			return err
		}
	}
	if err := s.fs.SyncDir(qdir); err != nil {
		return err
	}
	return s.fs.SyncDir(s.journalPath())
}

// freeName returns dir/stem+ext, or dir/stem-N+ext, that does not exist.
func freeName(fs vfs.FS, dir, stem, ext string) (string, error) {
	for n := 0; ; n++ {
		name := stem
		if n > 0 {
			name = fmt.Sprintf("%s-%d", stem, n)
		}
		path := filepath.Join(dir, name+ext)
		_, err := fs.Stat(path)
		if vfs.IsNotExist(err) {
			return path, nil
		}
		if err != nil {
			return "", err
		}
	}
}

// startJournal creates the journal's directory and first file (from a
// spare left by an earlier run when there is one; extra spares and
// leftover temporary files are removed), after replay, and starts the
// checkpoint goroutine.
func (s *Store) startJournal(p *journalPlan) error {
	dir := s.journalPath()
	if err := s.fs.MkdirAll(dir, vfs.DirMode); err != nil {
		return err
	}
	if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
		return err
	}
	if err := s.removeJournalLeftovers(p); err != nil {
		return err
	}
	spare := ""
	if len(p.spares) > 0 {
		spare = p.spares[0]
	}
	fresh := spare == ""
	if fresh && s.cfg.JournalPrealloc {
		// A new node: its first file is preallocated before the store
		// opens, and the checkpoint goroutine prepares the next one.
		var err error
		if spare, err = s.writeZeroSpare(); err != nil {
			return err
		}
	}
	jr := &journal{fs: s.fs, dir: dir}
	if err := jr.openFile(p.nextSeq, p.nextRound, spare); err != nil {
		return err
	}
	s.jr = jr // only once it holds a file: a failed start is tried again (replay_wait.go)
	s.ckpt = make(chan checkpoint)
	s.ckptDone = make(chan struct{})
	s.spares = make(chan string, 1)
	go s.checkpointLoop(s.cfg.JournalPrealloc && fresh, s.openSyncer())
	return nil
}

// removeJournalLeftovers removes spares beyond the first and temporary
// files of an interrupted preallocation.
func (s *Store) removeJournalLeftovers(p *journalPlan) error {
	names, err := s.fs.ReadDir(s.journalPath())
	if err != nil {
		return err
	}
	changed := false
	for _, name := range names {
		if strings.HasSuffix(name, ".tmp") {
			if err := s.fs.Remove(filepath.Join(s.journalPath(), name)); err != nil {
				return err
			}
			changed = true
		}
	}
	for len(p.spares) > 1 {
		if err := s.fs.Remove(p.spares[len(p.spares)-1]); err != nil {
			return err
		}
		p.spares, changed = p.spares[:len(p.spares)-1], true
	}
	if changed {
		return s.fs.SyncDir(s.journalPath())
	}
	return nil
}
