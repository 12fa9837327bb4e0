package storage

import (
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// The round buffer is sized once from journalBodySize: a round holding
// every kind of record must come out at exactly that size, or rounds
// would grow by copying again (or the size would overshoot).
func TestJournalBodySizeIsExact(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	sg := s.segs[1]
	s.mu.Unlock()
	round := []request{
		{sg: sg, create: true, base: 7, owner: 3},
		{sg: sg, log: sg.h.log, batch: span(t, 0, 3)},
		{sg: sg, log: sg.h.log, batch: span(t, 3, 40)},
		{sg: sg},
		{sg: sg, cut: true, pos: 10, base: 2},
		{sg: sg, log: sg.h.log, batch: span(t, 43, 1)},
		{sg: sg, tomb: true},
	}
	groups, of := groupRound(round)
	want := journalBodySize(round, of)
	b, any := s.journalBody(round, groups, of)
	if !any || len(b)-roundHeaderLen != want {
		t.Fatalf("journal body of %d bytes (any %v), journalBodySize %d", len(b)-roundHeaderLen, any, want)
	}
}
