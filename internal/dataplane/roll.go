package dataplane

// KindRoll asks the node writing a range to seal its active segment so
// that another node can split or merge the range. It is numbered apart
// from the first kinds so that kinds added beside it do not collide.
const KindRoll Kind = 16

// Roll asks the node writing range Range to fence and seal its active
// segment Segment (recording the seal in the metadata with what the fence
// answered), and then to open no successor for HoldMs milliseconds unless
// the range is retired first. The hold is what lets the asker's split or
// merge, which the metadata refuses while the range has an active
// segment, land between the seal and the next produce.
type Roll struct {
	Range, Segment uint64
	HoldMs         uint64
}

// RollAnswer is the end the segment was sealed at.
type RollAnswer struct{ End uint64 }

func (m *Roll) Encode() []byte {
	var e encoder
	e.kind(KindRoll)
	e.u(m.Range)
	e.u(m.Segment)
	e.u(m.HoldMs)
	return e.buf
}

func (m *RollAnswer) Encode() []byte {
	var e encoder
	e.status(StatusOK)
	e.u(m.End)
	return e.buf
}

func DecodeRoll(msg []byte) (Roll, error) {
	d := decoder{buf: msg}
	d.kind(KindRoll)
	m := Roll{Range: d.u(), Segment: d.u(), HoldMs: d.u()}
	return m, d.finish()
}

func DecodeRollAnswer(msg []byte) (RollAnswer, error) {
	d, err := answer(msg)
	if err != nil {
		return RollAnswer{}, err
	}
	m := RollAnswer{End: d.u()}
	return m, d.finish()
}
