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

// record returns global record i, its value stamped with origin when the
// value has room for it. Each record gets its own slices: the client keeps
// them until the record is acked.
func (p *payload) record(i int64, origin time.Time) client.Record {
	v := make([]byte, p.size)
	copy(v, p.template)
	stamp(v, origin)
	var k []byte
	if p.keys > 0 {
		k = strconv.AppendInt([]byte{'k'}, i%int64(p.keys), 10)
	}
	return client.Record{Key: k, Value: v}
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
