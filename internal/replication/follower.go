package replication

import (
	"errors"
	"fmt"
)

var (
	// ErrFenced is returned by Follower.Append after the fence: nothing
	// is accepted on a fenced copy (W4).
	ErrFenced = errors.New("replication: copy fenced")
	// ErrBelowWatermark is returned by Follower.Truncate for a seal below
	// what this copy learned was committed: cutting there would lose
	// acknowledged records (W6), so the copy is left alone and the
	// inconsistency reported (S4).
	ErrBelowWatermark = errors.New("replication: seal below the commit watermark")
	// ErrWrongSegment is returned for a message naming another segment.
	ErrWrongSegment = errors.New("replication: message for another segment")
	// ErrSealConflict is returned by Follower.Truncate for a seal other
	// than the one the copy already applied: a segment is sealed once
	// (S2), so two seals that disagree are an inconsistency to report,
	// and the copy is left alone (S4).
	ErrSealConflict = errors.New("replication: copy already sealed at another end")
)

// Accepted is what a Follower asks of its caller after an Append.
type Accepted struct {
	// Write holds batches to append to the local store, in order, each
	// already stamped with its offsets; together they span Span.
	Write [][]byte
	Span  Span
	// Reply is a message for the primary (an Ack or a Behind), or nil.
	Reply Message
}

// Truncation is a Follower's answer to the control plane's seal.
type Truncation struct {
	// Cut asks the caller to cut the local copy at At: everything at or
	// above it was never acknowledged and is not part of the sealed
	// segment.
	Cut bool
	At  uint64
	// Missing is what the copy lacks of the sealed segment, for the
	// caller to copy from a replica that holds it; empty when none.
	Missing Span
}

// Follower is the state machine of one copy of a segment on a node that
// is not its primary. It accepts batches only at exactly the offset it
// expects, so its bytes are always a prefix of the primary's. It is not
// safe for concurrent use: its owner serialises calls.
type Follower struct {
	segment, base uint64
	// appended is the end of everything handed to the store, synced the
	// end the store reported fsynced: base <= synced <= appended.
	appended, synced uint64
	watermark        uint64
	fenced           bool
	fenceEnd         uint64
	// sealed marks the seal Truncate applied, at sealEnd.
	sealed  bool
	sealEnd uint64
}

// NewFollower starts the copy of segment whose first offset is base, on a
// store that durably holds everything below recovered (base for a new
// copy; after a restart, the end the store recovered and fsynced). Its
// learned watermark starts at base; RestoreFollower starts it where the
// copy had learned it before a restart.
func NewFollower(segment, base, recovered uint64) *Follower {
	return RestoreFollower(segment, base, recovered, base)
}

// RestoreFollower restarts a copy like NewFollower, with the watermark
// it had learned before the restart, which the caller kept (with the
// copy's data, or from the reads it served). Without it the copy would
// serve less than it served before (R1), and Truncate could not refuse
// a seal below records this copy knew were acknowledged (W6). A
// watermark above recovered is kept: the copy then catches up under it.
func RestoreFollower(segment, base, recovered, watermark uint64) *Follower {
	recovered = max(recovered, base)
	return &Follower{segment: segment, base: base, appended: recovered, synced: recovered, watermark: max(watermark, base)}
}

// End is the end of everything this copy accepted.
func (f *Follower) End() uint64 { return f.appended }

// SyncedEnd is the end this copy's store reported fsynced.
func (f *Follower) SyncedEnd() uint64 { return f.synced }

// Watermark is the commit watermark this copy learned from its primary:
// reads served from this copy stop there (R1). It only grows.
func (f *Follower) Watermark() uint64 { return f.watermark }

// Fenced reports whether Fence or Truncate was called.
func (f *Follower) Fenced() bool { return f.fenced }

// Append takes an Append from the primary. Batches starting exactly at
// the expected offset are accepted (the part of them this copy already
// has is skipped); a message starting above it is answered with Behind
// so that the primary sends the gap; a message wholly below it is a
// repeat, answered with an Ack of what is fsynced and not written again.
func (f *Follower) Append(m Append) (Accepted, error) {
	if m.Segment != f.segment {
		return Accepted{}, fmt.Errorf("%w: %d, this copy is of %d", ErrWrongSegment, m.Segment, f.segment)
	}
	if f.fenced {
		return Accepted{}, ErrFenced
	}
	parts, end, err := splitRun(m.Batches, m.Base)
	if err != nil {
		return Accepted{}, err
	}
	if end != m.End {
		return Accepted{}, fmt.Errorf("%w: batches end at %d, the message says %d", ErrBadRun, end, m.End)
	}
	// NB: the watermark may be above what this copy holds; reads stop at
	// the lower of the two, and every byte below both is committed.
	f.watermark = max(f.watermark, m.Watermark)
	if m.Base > f.appended {
		return Accepted{Reply: Behind{Segment: f.segment, Has: f.appended}}, nil
	}
	if m.End <= f.appended {
		if len(parts) > 0 && m.End <= f.synced {
			return Accepted{Reply: Ack{Segment: f.segment, End: f.synced}}, nil
		}
		return Accepted{}, nil
	}
	at := m.Base
	for len(parts) > 0 && at < f.appended {
		at += spanOf(parts[0])
		parts = parts[1:]
	}
	if at != f.appended {
		// The message's batches cut through this copy's end: a primary
		// never does that, as both hold the same batches.
		return Accepted{Reply: Behind{Segment: f.segment, Has: f.appended}}, nil
	}
	acc := Accepted{Write: parts, Span: Span{Base: f.appended, End: m.End}}
	f.appended = m.End
	return acc, nil
}

// Synced reports that the store fsynced everything below end, and
// returns the Ack for the primary, or nil. A fenced copy acks nothing
// more: its fence answer must stay an upper bound of its votes (W6).
func (f *Follower) Synced(end uint64) Message {
	end = min(end, f.appended)
	if end <= f.synced {
		return nil
	}
	f.synced = end
	if f.fenced {
		return nil
	}
	return Ack{Segment: f.segment, End: end}
}

// Fence latches the copy: nothing is accepted after it and no ack is sent.
// It answers the fsynced end, and the same end however often it is asked.
func (f *Follower) Fence() uint64 {
	if !f.fenced {
		f.fenced, f.fenceEnd = true, f.synced
	}
	return f.fenceEnd
}

// FenceAnswer fences the copy like Fence and returns the answer to send,
// marked as a follower's.
func (f *Follower) FenceAnswer() FenceAnswer {
	return FenceAnswer{Segment: f.segment, End: f.Fence(), Role: RoleFollower}
}

// Truncate applies the control plane's seal of the segment at sealEnd,
// which a failover chose from fence answers. It fences the copy, and a
// copy holding more than sealEnd is cut there. A seal below the learned
// watermark is refused with ErrBelowWatermark, and one other than a seal
// already applied with ErrSealConflict; neither changes anything. The
// same seal again answers what the copy still misses.
func (f *Follower) Truncate(sealEnd uint64) (Truncation, error) {
	if f.sealed && sealEnd != f.sealEnd {
		return Truncation{}, fmt.Errorf("%w: sealed at %d, now at %d", ErrSealConflict, f.sealEnd, sealEnd)
	}
	if sealEnd < f.watermark || sealEnd < f.base {
		return Truncation{}, fmt.Errorf("%w: sealed at %d, watermark %d, base %d", ErrBelowWatermark, sealEnd, f.watermark, f.base)
	}
	f.Fence()
	f.sealed, f.sealEnd = true, sealEnd
	var t Truncation
	if f.appended > sealEnd {
		t.Cut, t.At = true, sealEnd
		f.appended, f.synced = sealEnd, min(f.synced, sealEnd)
	}
	if f.appended < sealEnd {
		t.Missing = Span{Base: f.appended, End: sealEnd}
	}
	return t, nil
}
