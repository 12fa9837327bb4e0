package wire

// Header is one record header. Key and Value are each a nullable str on
// the wire: nil is absent, []byte{} is present and empty.
type Header struct{ Key, Value []byte }

// Record is a record as clients see it: no offset, no flags.
//
//	record = key:str  value_len:u32 value[value_len]  timestamp:u64
//	         header_count:u32 (key:str value:str)*header_count
//
// Key nil means no key, distinct from an empty key. The value has no
// absent form on the wire: a nil Value encodes as empty, and decoding
// always yields a non-nil Value. Timestamp is the client's milliseconds
// since the epoch, kept as data and never trusted by the broker.
type Record struct {
	Key       []byte
	Value     []byte
	Timestamp uint64
	Headers   []Header
}

// Size returns the number of bytes AppendRecord appends for r, so callers
// can fill a response up to a byte budget without encoding twice.
func (r Record) Size() int {
	n := bytesSize(r.Key) + 4 + len(r.Value) + 8 + 4
	for _, h := range r.Headers {
		n += bytesSize(h.Key) + bytesSize(h.Value)
	}
	return n
}

// AppendRecord appends the wire encoding of r to dst.
func AppendRecord(dst []byte, r Record) []byte {
	dst = appendBytes(dst, r.Key)
	dst = appendU32(dst, uint32(len(r.Value)))
	dst = append(dst, r.Value...)
	dst = appendU64(dst, r.Timestamp)
	dst = appendU32(dst, uint32(len(r.Headers)))
	for _, h := range r.Headers {
		dst = appendBytes(dst, h.Key)
		dst = appendBytes(dst, h.Value)
	}
	return dst
}

// AppendRecords appends list(record): a count, then each record.
func AppendRecords(dst []byte, recs []Record) []byte {
	dst = appendU32(dst, uint32(len(recs)))
	for i := range recs {
		dst = AppendRecord(dst, recs[i])
	}
	return dst
}

// records reads list(record) into dst[:0], reusing its capacity.
//
// NB: allocation is bounded by the bytes present, not by the counts the
// payload declares: count checks each list against the remaining bytes,
// and every preallocation is cut to what those bytes could back in
// memory (room), growing by append only as records and headers actually
// decode. Headers of all records share one backing array, sized on the
// first record that has headers, so a batch costs a few allocations
// rather than one per record. Each record's Headers is capped at its own
// length, so appending to it cannot clobber a neighbour.
// Header limits. A header costs two bytes on the wire and about fifty in
// memory, once decoded here and again wherever records are copied, so an
// unbounded count would let one frame of empty headers cost the node
// gigabytes. Kafka's clients send a handful per record.
const (
	// MaxHeadersPerRecord bounds one record's headers.
	MaxHeadersPerRecord = 1024
	// MaxHeadersPerRequest bounds the headers of all records of one
	// produce request (about 3 MiB decoded at the most).
	MaxHeadersPerRequest = 64 << 10
)

func (d *decoder) records(dst []Record) []Record {
	dst = dst[:0]
	total := 0
	n := d.count(minRecordLen)
	if n == 0 {
		return dst
	}
	if want := room[Record](d, n); cap(dst) < want {
		dst = make([]Record, 0, want)
	}
	var headers []Header
	for i := range n {
		rec := Record{Key: d.bytes(), Value: d.value(), Timestamp: d.u64()}
		if hn := d.count(minHeaderLen); hn > 0 {
			total += hn
			if hn > MaxHeadersPerRecord || total > MaxHeadersPerRequest {
				d.fail("too many headers: %d in a record, %d in the request (at most %d and %d)",
					hn, total, MaxHeadersPerRecord, MaxHeadersPerRequest)
				return dst
			}
			if headers == nil {
				// Guess that the rest look like this one, within what the
				// remaining bytes can back.
				headers = make([]Header, 0, room[Header](d, int(min(uint64(hn)*uint64(n-i), uint64(len(d.b))))))
			}
			start := len(headers)
			for range hn {
				h := Header{Key: d.bytes(), Value: d.bytes()}
				if d.err != nil {
					return dst
				}
				headers = append(headers, h)
			}
			rec.Headers = headers[start:len(headers):len(headers)]
		}
		if d.err != nil {
			return dst
		}
		dst = append(dst, rec)
	}
	return dst
}
