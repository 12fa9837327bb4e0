package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind is a message's first byte. Values are part of the protocol: never
// renumber them.
type Kind uint8

const (
	KindAppend   Kind = 1
	KindRead     Kind = 2
	KindInfo     Kind = 3
	KindSeek     Kind = 4
	KindInterest Kind = 5
	KindAppended Kind = 6
)

func (k Kind) String() string {
	switch k {
	case KindAppend:
		return "append"
	case KindRead:
		return "read"
	case KindInfo:
		return "info"
	case KindSeek:
		return "seek"
	case KindInterest:
		return "interest"
	case KindAppended:
		return "appended"
	case KindRoll:
		return "roll"
	case KindGroup:
		return "group"
	case KindCopy:
		return "copy"
	}
	return fmt.Sprintf("kind-%d", uint8(k))
}

// Status is the first byte of an answer.
type Status uint8

const (
	// StatusOK: the answer of the request's kind follows.
	StatusOK Status = 0
	// StatusRefused: the request failed; Refusal.Reason says why, as a
	// wire reason.
	StatusRefused Status = 1
	// StatusRetired: the range no longer takes writes (split, merged or
	// deleted); Refusal.Stored batches of the append were enqueued before.
	StatusRetired Status = 2
	// StatusNotHere: the node does not hold what the request needs (the
	// range's active segment, or the segment read); Refusal.Node names
	// the node that does when known. Nothing was stored.
	StatusNotHere Status = 3
	// StatusNotFound: the node holds no file of the segment (yet).
	StatusNotFound Status = 4
)

// MaxBytes bounds one byte string or text in a message, and MaxCount one
// list: a decoder refuses more before allocating.
const (
	MaxBytes = 64 << 20
	MaxCount = 1 << 20
)

// ErrMalformed wraps every decoding failure.
var ErrMalformed = errors.New("dataplane: malformed message")

// Append asks the node writing a range to append batches to it.
type Append struct {
	Topic, Range uint64
	Batches      [][]byte
}

// AppendAnswer holds the base offset each batch was stored at.
type AppendAnswer struct{ Bases []uint64 }

// Read asks for the batches of a segment from offset From, at most
// MaxBytes of them (the first batch whole), none at or past UpTo.
type Read struct {
	Segment, From uint64
	MaxBytes      uint64
	UpTo          uint64
}

// ReadAnswer carries batches as stored, the offset after the last one,
// and the segment's durable end when the read was served.
type ReadAnswer struct {
	Next, DurableEnd uint64
	Sealed           bool
	Batches          []byte
}

// Info asks for a segment's extent.
type Info struct{ Segment uint64 }

// InfoAnswer is a segment's extent as its node knows it.
type InfoAnswer struct {
	Base, DurableEnd, Records uint64
	MaxTimestamp              int64
	Sealed                    bool
}

// Seek asks for the base offset of the first batch of a segment that may
// hold a record stamped at or after AtMs.
type Seek struct {
	Segment uint64
	AtMs    int64
}

// SeekAnswer: Found is false when no batch qualifies.
type SeekAnswer struct {
	Found bool
	Base  uint64
}

// Interest asks a node to notify the sender of appends to Topics for TTLMs
// milliseconds. The answer lists where those topics' ranges written on the
// node end now.
type Interest struct {
	TTLMs  uint64
	Topics []uint64
}

// End is where one range written on a node ends.
type End struct{ Topic, Range, End uint64 }

// InterestAnswer lists the ends of the ranges of the asked topics whose
// active segment is on the answering node.
type InterestAnswer struct{ Ends []End }

// Appended tells an interested node that ranges grew.
type Appended struct{ Ends []End }

// Refusal is a failed call's answer.
type Refusal struct {
	Status  Status
	Stored  uint64
	Node    uint64
	Reason  string
	Message string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%s: %s", r.Reason, r.Message)
}

// KindOf returns a message's kind.
func KindOf(msg []byte) (Kind, error) {
	if len(msg) == 0 {
		return 0, fmt.Errorf("%w: empty", ErrMalformed)
	}
	return Kind(msg[0]), nil
}

// AppendHeaderBytes bounds what an append holds besides its batches: the
// kind, topic, range and count.
const AppendHeaderBytes = 1 + 3*binary.MaxVarintLen64

// AppendBatchBytes is what one batch of n bytes adds to an append, so a
// sender can cut its batches into appends that each fit a frame.
func AppendBatchBytes(n int) int {
	var tmp [binary.MaxVarintLen64]byte
	return n + binary.PutUvarint(tmp[:], uint64(n))
}

// Encoders.

func (m *Append) Encode() []byte {
	n := AppendHeaderBytes
	for _, b := range m.Batches {
		n += AppendBatchBytes(len(b))
	}
	e := encoder{buf: make([]byte, 0, n)}
	e.kind(KindAppend)
	e.u(m.Topic)
	e.u(m.Range)
	e.u(uint64(len(m.Batches)))
	for _, b := range m.Batches {
		e.bytes(b)
	}
	return e.buf
}

func (m *Read) Encode() []byte {
	var e encoder
	e.kind(KindRead)
	e.u(m.Segment)
	e.u(m.From)
	e.u(m.MaxBytes)
	e.u(m.UpTo)
	return e.buf
}

func (m *Info) Encode() []byte {
	var e encoder
	e.kind(KindInfo)
	e.u(m.Segment)
	return e.buf
}

func (m *Seek) Encode() []byte {
	var e encoder
	e.kind(KindSeek)
	e.u(m.Segment)
	e.i(m.AtMs)
	return e.buf
}

func (m *Interest) Encode() []byte {
	var e encoder
	e.kind(KindInterest)
	e.u(m.TTLMs)
	e.u(uint64(len(m.Topics)))
	for _, t := range m.Topics {
		e.u(t)
	}
	return e.buf
}

func (m *Appended) Encode() []byte {
	var e encoder
	e.kind(KindAppended)
	e.ends(m.Ends)
	return e.buf
}

func (m *AppendAnswer) Encode() []byte {
	var e encoder
	e.status(StatusOK)
	e.u(uint64(len(m.Bases)))
	for _, b := range m.Bases {
		e.u(b)
	}
	return e.buf
}

func (m *ReadAnswer) Encode() []byte {
	e := encoder{buf: make([]byte, 0, len(m.Batches)+40)}
	e.status(StatusOK)
	e.u(m.Next)
	e.u(m.DurableEnd)
	e.flag(m.Sealed)
	e.bytes(m.Batches)
	return e.buf
}

func (m *InfoAnswer) Encode() []byte {
	var e encoder
	e.status(StatusOK)
	e.u(m.Base)
	e.u(m.DurableEnd)
	e.u(m.Records)
	e.i(m.MaxTimestamp)
	e.flag(m.Sealed)
	return e.buf
}

func (m *SeekAnswer) Encode() []byte {
	var e encoder
	e.status(StatusOK)
	e.flag(m.Found)
	e.u(m.Base)
	return e.buf
}

func (m *InterestAnswer) Encode() []byte {
	var e encoder
	e.status(StatusOK)
	e.ends(m.Ends)
	return e.buf
}

func (r *Refusal) Encode() []byte {
	var e encoder
	st := r.Status
	if st == StatusOK {
		st = StatusRefused // a refusal is never an answer
	}
	e.status(st)
	e.u(r.Stored)
	e.u(r.Node)
	e.bytes([]byte(r.Reason))
	e.bytes([]byte(r.Message))
	return e.buf
}

// Request decoders: each expects the message's kind byte first.

func DecodeAppend(msg []byte) (Append, error) {
	d := decoder{buf: msg}
	d.kind(KindAppend)
	m := Append{Topic: d.u(), Range: d.u()}
	n := d.count(1)
	for range n {
		m.Batches = append(m.Batches, d.bytes())
	}
	return m, d.finish()
}

func DecodeRead(msg []byte) (Read, error) {
	d := decoder{buf: msg}
	d.kind(KindRead)
	m := Read{Segment: d.u(), From: d.u(), MaxBytes: d.u(), UpTo: d.u()}
	return m, d.finish()
}

func DecodeInfo(msg []byte) (Info, error) {
	d := decoder{buf: msg}
	d.kind(KindInfo)
	m := Info{Segment: d.u()}
	return m, d.finish()
}

func DecodeSeek(msg []byte) (Seek, error) {
	d := decoder{buf: msg}
	d.kind(KindSeek)
	m := Seek{Segment: d.u(), AtMs: d.i()}
	return m, d.finish()
}

func DecodeInterest(msg []byte) (Interest, error) {
	d := decoder{buf: msg}
	d.kind(KindInterest)
	m := Interest{TTLMs: d.u()}
	n := d.count(1)
	for range n {
		m.Topics = append(m.Topics, d.u())
	}
	return m, d.finish()
}

func DecodeAppended(msg []byte) (Appended, error) {
	d := decoder{buf: msg}
	d.kind(KindAppended)
	m := Appended{Ends: d.ends()}
	return m, d.finish()
}

// Answer decoders: a refusal comes back as a *Refusal error.

func DecodeAppendAnswer(msg []byte) (AppendAnswer, error) {
	d, err := answer(msg)
	if err != nil {
		return AppendAnswer{}, err
	}
	var m AppendAnswer
	n := d.count(1)
	for range n {
		m.Bases = append(m.Bases, d.u())
	}
	return m, d.finish()
}

func DecodeReadAnswer(msg []byte) (ReadAnswer, error) {
	d, err := answer(msg)
	if err != nil {
		return ReadAnswer{}, err
	}
	m := ReadAnswer{Next: d.u(), DurableEnd: d.u(), Sealed: d.flag(), Batches: d.bytes()}
	return m, d.finish()
}

func DecodeInfoAnswer(msg []byte) (InfoAnswer, error) {
	d, err := answer(msg)
	if err != nil {
		return InfoAnswer{}, err
	}
	m := InfoAnswer{Base: d.u(), DurableEnd: d.u(), Records: d.u(), MaxTimestamp: d.i(), Sealed: d.flag()}
	return m, d.finish()
}

func DecodeSeekAnswer(msg []byte) (SeekAnswer, error) {
	d, err := answer(msg)
	if err != nil {
		return SeekAnswer{}, err
	}
	m := SeekAnswer{Found: d.flag(), Base: d.u()}
	return m, d.finish()
}

func DecodeInterestAnswer(msg []byte) (InterestAnswer, error) {
	d, err := answer(msg)
	if err != nil {
		return InterestAnswer{}, err
	}
	m := InterestAnswer{Ends: d.ends()}
	return m, d.finish()
}

// answer reads an answer's status: a decoder positioned after it for
// StatusOK, the decoded *Refusal (or a decoding failure) otherwise.
func answer(msg []byte) (*decoder, error) {
	d := &decoder{buf: msg}
	st := Status(d.byte())
	if d.err != nil {
		return nil, d.err
	}
	if st == StatusOK {
		return d, nil
	}
	if st > StatusNotFound {
		return nil, fmt.Errorf("%w: unknown status %d", ErrMalformed, st)
	}
	r := &Refusal{Status: st, Stored: d.u(), Node: d.u(), Reason: string(d.bytes()), Message: string(d.bytes())}
	if err := d.finish(); err != nil {
		return nil, err
	}
	return nil, r
}

type encoder struct{ buf []byte }

func (e *encoder) kind(k Kind)     { e.buf = append(e.buf, byte(k)) }
func (e *encoder) status(s Status) { e.buf = append(e.buf, byte(s)) }
func (e *encoder) u(v uint64)      { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) i(v int64)       { e.buf = binary.AppendVarint(e.buf, v) }

func (e *encoder) flag(v bool) {
	b := byte(0)
	if v {
		b = 1
	}
	e.buf = append(e.buf, b)
}

func (e *encoder) bytes(b []byte) {
	e.u(uint64(len(b)))
	e.buf = append(e.buf, b...)
}

func (e *encoder) ends(ends []End) {
	e.u(uint64(len(ends)))
	for _, x := range ends {
		e.u(x.Topic)
		e.u(x.Range)
		e.u(x.End)
	}
}

// decoder reads fields in order; the first failure sticks and later reads
// return zero values, so a decode function checks once, at finish.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.buf) == 0 {
		d.fail("truncated")
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) kind(k Kind) {
	if got := Kind(d.byte()); d.err == nil && got != k {
		d.fail("kind %v, want %v", got, k)
	}
}

func (d *decoder) flag() bool {
	switch b := d.byte(); b {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("flag %d", b)
		return false
	}
}

func (d *decoder) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) i() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// count reads a list length whose items take at least minItem bytes each.
func (d *decoder) count(minItem int) int {
	n := d.u()
	if d.err == nil && (n > MaxCount || n > uint64(len(d.buf)/minItem)) {
		d.fail("count %d with %d bytes left", n, len(d.buf))
		return 0
	}
	return int(n)
}

// bytes returns a copy: a message's buffer may be reused by its owner.
func (d *decoder) bytes() []byte {
	n := d.u()
	if d.err != nil {
		return nil
	}
	if n > MaxBytes || n > uint64(len(d.buf)) {
		d.fail("byte string of %d with %d bytes left", n, len(d.buf))
		return nil
	}
	out := make([]byte, n)
	copy(out, d.buf[:n])
	d.buf = d.buf[n:]
	return out
}

func (d *decoder) ends() []End {
	n := d.count(3)
	var out []End
	for range n {
		out = append(out, End{Topic: d.u(), Range: d.u(), End: d.u()})
	}
	return out
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.buf) > 0 {
		d.fail("%d trailing bytes", len(d.buf))
	}
	return d.err
}
