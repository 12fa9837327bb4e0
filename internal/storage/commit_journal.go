package storage

import (
	"encoding/binary"
	"time"
)

// journalRound is commit with the node journal on: the round's records go
// to the journal in one write, the segment files are written while the
// journal's fdatasync runs, and the batches are published to readers only
// once it returned. The segment files are fsynced later, by checkpoints.
func (s *Store) journalRound(round []request, groups []*group, of []int) {
	b, any := s.journalBody(round, groups, of)
	if !any {
		return
	}
	if err := s.jr.write(b); err != nil {
		if isNoSpace(err) && plainRound(round) {
			// Nothing reached a segment file and the torn record is
			// overwritten by the next round: refuse, do not fail.
			failGroups(groups, s.outOfSpace(round, err))
			return
		}
		if isNoSpace(err) {
			// A create, cut or tombstone waits on this record: write it
			// again, at the same place, once space returns.
			err = s.rewriteJournal(round, b, err)
		}
		if err != nil {
			failGroups(groups, err)
			s.fail(err)
			return
		}
	}
	synced := make(chan error, 1)
	start := time.Now()
	go func() { synced <- s.jr.f.Sync() }()
	s.writeAll(groups)
	err := <-synced
	s.stats.syncLatency.Since(start)
	s.stats.journalSyncs.Add(1)
	if err != nil {
		failGroups(groups, err)
		s.fail(err)
		return
	}
	if err := s.writeBehind(round, groups); err != nil {
		s.fail(err) // the journal file stays: a replay writes what is missing
	}
	for _, g := range groups {
		s.jr.dirty[g.sg] = struct{}{}
		if g.err == nil {
			g.err = g.log.Publish()
		}
	}
	if s.jr.size >= s.cfg.JournalFileBytes {
		if err := s.retire(); isNoSpace(err) {
			s.markFull(err) // the current file goes on; the next round tries again
		} else if err != nil {
			s.fail(err)
		}
	}
}

// journalBody encodes the round's records in queue order: each batch with
// the file position it is about to be written at, creations, cuts and
// tombstones. any is false when the round holds none of them (only plain
// barriers).
func (s *Store) journalBody(round []request, groups []*group, of []int) (b []byte, any bool) {
	for _, g := range groups {
		g.pos = g.log.WriteEnd()
	}
	b = s.jr.begin(journalBodySize(round, of))
	for i, r := range round {
		switch {
		case r.tomb:
			b = appendRecordHeader(b, recTomb, r.sg.id, 0, 0)
			any = true
		case r.cut:
			b = appendRecordHeader(b, recCut, r.sg.id, r.pos, 8)
			b = binary.LittleEndian.AppendUint64(b, r.base)
			any = true
		case r.create:
			b = appendRecordHeader(b, recCreate, r.sg.id, int64(r.base), 4)
			b = binary.LittleEndian.AppendUint32(b, r.owner)
			s.jr.dirty[r.sg] = struct{}{} // its header and name need a checkpoint
			any = true
		case of[i] >= 0:
			g := groups[of[i]]
			b = appendRecordHeader(b, recBatch, r.sg.id, g.pos, len(r.batch))
			b = append(b, r.batch...)
			g.pos += int64(len(r.batch))
			any = true
		}
	}
	return b, any
}

// journalBodySize is how many bytes journalBody writes for round.
func journalBodySize(round []request, of []int) int {
	n := 0
	for i, r := range round {
		switch {
		case r.tomb:
			n += recordHeaderLen
		case r.cut:
			n += recordHeaderLen + 8
		case r.create:
			n += recordHeaderLen + 4
		case of[i] >= 0:
			n += recordHeaderLen + len(r.batch)
		}
	}
	return n
}

func failGroups(groups []*group, err error) {
	for _, g := range groups {
		if g.err == nil {
			g.err = err
		}
	}
}
