package bench

import (
	"encoding/binary"
	"strconv"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// payload builds the records of a run.
type payload struct {
	size     int
	keys     int
	template []byte // filler copied into every value
}

// newPayload returns a generator of values of size bytes and keys of
// cardinality keys (0 = no key). The filler is a fixed pseudo-random
// pattern so that a compressing path, if any, cannot shrink it to nothing.
func newPayload(size, keys int) *payload {
	t := make([]byte, size)
	x := uint32(2463534242)
	for i := range t {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		t[i] = byte(x)
	}
	return &payload{size: size, keys: keys, template: t}
}

// recordBuf is one worker's record buffers. The client copies a record's
// bytes when Produce is called, so a worker builds every record in the
// same two buffers instead of allocating a value per record, which at
// millions of records a second would cost the client's CPU more than
// producing them.
type recordBuf struct{ key, value []byte }

// record returns global record i, built in buf (and valid until the next
// call with buf), its value stamped with origin when origin is set and the
// value has room for it.
func (p *payload) record(i int64, origin time.Time, buf *recordBuf) client.Record {
	if buf.value == nil {
		buf.value = make([]byte, p.size)
		copy(buf.value, p.template)
	}
	if !origin.IsZero() {
		stamp(buf.value, origin)
	}
	var k []byte
	if p.keys > 0 {
		buf.key = strconv.AppendInt(append(buf.key[:0], 'k'), i%int64(p.keys), 10)
		k = buf.key
	}
	return client.Record{Key: k, Value: buf.value}
}

// stamp writes t into the first 8 bytes of v, if v has them.
func stamp(v []byte, t time.Time) {
	if len(v) >= stampBytes {
		binary.BigEndian.PutUint64(v, uint64(t.UnixNano()))
	}
}

// stamped reads the origin stamp of v; ok is false when v is too short.
func stamped(v []byte) (t time.Time, ok bool) {
	if len(v) < stampBytes {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(v))), true
}
