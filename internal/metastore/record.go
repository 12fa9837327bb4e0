package metastore

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"

	"github.com/malachi-log/malachi/internal/metadata"
)

// A record is a little-endian u32 payload length, a little-endian u32
// CRC32C of the payload, then the payload (the JSON of one command, or of a
// snapshot envelope).
const (
	headerLen = 8
	// maxRecord bounds a payload. It rejects garbage lengths on recovery;
	// commands are far smaller (a full commit_offsets is ~300 KiB).
	maxRecord = 16 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends the framed payload to dst.
func appendRecord(dst, payload []byte) []byte {
	var h [headerLen]byte
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[4:8], crc32.Checksum(payload, castagnoli))
	return append(append(dst, h[:]...), payload...)
}

// encodeCommand frames a command for the log.
func encodeCommand(cmd metadata.Command) ([]byte, error) {
	payload, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	if len(payload) > maxRecord {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, len(payload))
	}
	return appendRecord(nil, payload), nil
}

// recordAt returns the payload of a well-formed record at off: a plausible
// length that fits in data and a matching CRC. ok is false otherwise.
func recordAt(data []byte, off int) (payload []byte, ok bool) {
	if len(data)-off < headerLen {
		return nil, false
	}
	n := int(binary.LittleEndian.Uint32(data[off:]))
	sum := binary.LittleEndian.Uint32(data[off+4:])
	// A zero length is never written (a payload is never empty), and it is
	// what a zero-filled tail looks like: CRC32C of nothing is 0.
	if n == 0 || n > maxRecord || n > len(data)-off-headerLen {
		return nil, false
	}
	payload = data[off+headerLen : off+headerLen+n]
	return payload, crc32.Checksum(payload, castagnoli) == sum
}

// scanRecords splits data into payloads. It stops at the first record that
// is short, has a bad length or a bad CRC, and returns the length of the
// valid prefix. If a well-formed record exists anywhere after that point the
// damage is not a torn tail: it returns an error wrapping ErrCorrupt, since
// truncating would drop records that were acknowledged.
func scanRecords(data []byte) (payloads [][]byte, valid int, err error) {
	off := 0
	for off < len(data) {
		p, ok := recordAt(data, off)
		if !ok {
			break
		}
		payloads = append(payloads, p)
		off += headerLen + len(p)
	}
	if off < len(data) && recordAfter(data, off+1) {
		return nil, 0, fmt.Errorf("%w: bad record at byte %d followed by valid records", ErrCorrupt, off)
	}
	return payloads, off, nil
}

// recordAfter reports whether a well-formed record starts at any byte from
// off on. It tries every offset, but a candidate is usually refused by its
// length alone (JSON text read as a u32 exceeds maxRecord), so the cost is
// about one pass over the tail.
func recordAfter(data []byte, off int) bool {
	for ; off+headerLen < len(data); off++ {
		if _, ok := recordAt(data, off); ok {
			return true
		}
	}
	return false
}
