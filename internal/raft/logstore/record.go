package logstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A record is framed as in internal/metastore: a little-endian u32 payload
// length, a little-endian u32 CRC32C of the payload, then the payload. The
// payload is a little-endian u64 group id, a kind byte, and a body.
const (
	headerLen  = 8
	payloadMin = 9 // group id and kind
	// maxRecord bounds a payload. It rejects garbage lengths on recovery
	// and is a format constant, so that lowering an Option never makes
	// records already on disk unreadable. Options are checked against it.
	maxRecord = 64 << 20
	// formatVersion is the file format, stored in each file's header record.
	formatVersion = 1
)

// kind says what a record's body holds and how replay applies it.
type kind uint8

const (
	// kindHeader opens every file (group 0): format u32, file sequence
	// u64, dump length u64 (bytes of records after the header that belong
	// to the dump).
	kindHeader kind = iota + 1
	// kindReset replaces a group's state: dummy index u64, dummy term
	// u64, then the snapshot (protobuf). Written for a snapshot received
	// from a leader and for each group in a file's dump.
	kindReset
	// kindEntries appends entries, replacing any conflicting suffix:
	// uvarint count, then each entry as uvarint length and protobuf.
	kindEntries
	// kindHardState sets the hard state (protobuf).
	kindHardState
	// kindSnapshot records a snapshot the state machine took locally
	// (protobuf); entries are kept.
	kindSnapshot
	// kindCompact drops entries up to an index (u64).
	kindCompact
	// kindRemove drops a group.
	kindRemove
	// kindCommit (group 0, empty body) ends a batch: replay applies a
	// batch's records only once it reads its commit, so each Save is
	// atomic across a crash.
	kindCommit
	kindEnd // one past the last kind
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frame appends one record to dst: fill appends the payload after the
// header, which is then filled in.
func frame(dst []byte, group uint64, k kind, fill func([]byte) []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, headerLen)...)
	dst = binary.LittleEndian.AppendUint64(dst, group)
	dst = append(dst, byte(k))
	if fill != nil {
		dst = fill(dst)
	}
	payload := dst[start+headerLen:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, castagnoli))
	return dst
}

func appendHeader(dst []byte, seq, dumpLen uint64) []byte {
	return frame(dst, 0, kindHeader, func(b []byte) []byte {
		b = binary.LittleEndian.AppendUint32(b, formatVersion)
		b = binary.LittleEndian.AppendUint64(b, seq)
		return binary.LittleEndian.AppendUint64(b, dumpLen)
	})
}

// headerRecordLen is the framed size of a header record.
const headerRecordLen = headerLen + payloadMin + 4 + 8 + 8

func appendCommit(dst []byte) []byte { return frame(dst, 0, kindCommit, nil) }

func appendReset(dst []byte, group uint64, dummy *pb.Entry, snap *pb.Snapshot) []byte {
	return frame(dst, group, kindReset, func(b []byte) []byte {
		b = binary.LittleEndian.AppendUint64(b, dummy.GetIndex())
		b = binary.LittleEndian.AppendUint64(b, dummy.GetTerm())
		return appendProto(b, snap)
	})
}

func appendEntries(dst []byte, group uint64, ents []*pb.Entry) []byte {
	return frame(dst, group, kindEntries, func(b []byte) []byte {
		b = binary.AppendUvarint(b, uint64(len(ents)))
		for _, e := range ents {
			b = binary.AppendUvarint(b, uint64(proto.Size(e)))
			b = appendProto(b, e)
		}
		return b
	})
}

func appendHardState(dst []byte, group uint64, hs *pb.HardState) []byte {
	return frame(dst, group, kindHardState, func(b []byte) []byte { return appendProto(b, hs) })
}

func appendSnapshot(dst []byte, group uint64, snap *pb.Snapshot) []byte {
	return frame(dst, group, kindSnapshot, func(b []byte) []byte { return appendProto(b, snap) })
}

func appendCompact(dst []byte, group, index uint64) []byte {
	return frame(dst, group, kindCompact, func(b []byte) []byte {
		return binary.LittleEndian.AppendUint64(b, index)
	})
}

func appendRemove(dst []byte, group uint64) []byte { return frame(dst, group, kindRemove, nil) }

// appendProto cannot fail for raftpb messages, which have no required
// fields; a failure would be a broken invariant.
func appendProto(b []byte, m proto.Message) []byte {
	out, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		panic(fmt.Sprintf("logstore: marshal %T: %v", m, err))
	}
	return out
}

// record is a decoded payload. Only the fields of its kind are set.
type record struct {
	group uint64
	kind  kind

	seq, dumpLen uint64 // header
	index        uint64 // compact; reset: dummy index
	term         uint64 // reset: dummy term
	hard         *pb.HardState
	snap         *pb.Snapshot
	ents         []*pb.Entry
}

// decode parses a payload whose CRC matched. An error here is corruption:
// the bytes are what was written, so they must parse.
func decode(p []byte) (record, error) {
	r := record{group: binary.LittleEndian.Uint64(p), kind: kind(p[8])}
	body := p[payloadMin:]
	var err error
	switch r.kind {
	case kindHeader:
		if len(body) != 20 || binary.LittleEndian.Uint32(body) != formatVersion {
			return r, fmt.Errorf("header: unknown format")
		}
		r.seq, r.dumpLen = binary.LittleEndian.Uint64(body[4:]), binary.LittleEndian.Uint64(body[12:])
	case kindReset:
		if len(body) < 16 {
			return r, fmt.Errorf("reset: short body")
		}
		r.index, r.term = binary.LittleEndian.Uint64(body), binary.LittleEndian.Uint64(body[8:])
		r.snap = &pb.Snapshot{}
		err = proto.Unmarshal(body[16:], r.snap)
	case kindEntries:
		r.ents, err = decodeEntries(body)
	case kindHardState:
		r.hard = &pb.HardState{}
		err = proto.Unmarshal(body, r.hard)
	case kindSnapshot:
		r.snap = &pb.Snapshot{}
		err = proto.Unmarshal(body, r.snap)
	case kindCompact:
		if len(body) != 8 {
			return r, fmt.Errorf("compact: bad body")
		}
		r.index = binary.LittleEndian.Uint64(body)
	case kindRemove, kindCommit:
		if len(body) != 0 {
			return r, fmt.Errorf("kind %d: unexpected body", r.kind)
		}
	default:
		return r, fmt.Errorf("unknown kind %d", r.kind)
	}
	return r, err
}

func decodeEntries(body []byte) ([]*pb.Entry, error) {
	n, k := binary.Uvarint(body)
	// Every entry takes at least one byte, so a count beyond the body's
	// length is garbage and must not size an allocation.
	if k <= 0 || n > uint64(len(body)) {
		return nil, fmt.Errorf("entries: bad count")
	}
	body = body[k:]
	ents := make([]*pb.Entry, 0, n)
	for range n {
		size, k := binary.Uvarint(body)
		if k <= 0 || size > uint64(len(body)-k) {
			return nil, fmt.Errorf("entries: bad length")
		}
		e := &pb.Entry{}
		if err := proto.Unmarshal(body[k:k+int(size)], e); err != nil {
			return nil, err
		}
		ents = append(ents, e)
		body = body[k+int(size):]
	}
	if len(body) != 0 {
		return nil, fmt.Errorf("entries: %d trailing bytes", len(body))
	}
	return ents, nil
}

// recordAt returns the payload of a well-formed record at off: a plausible
// length that fits in data, a known kind and a matching CRC.
func recordAt(data []byte, off int) (payload []byte, ok bool) {
	if len(data)-off < headerLen {
		return nil, false
	}
	n := int(binary.LittleEndian.Uint32(data[off:]))
	sum := binary.LittleEndian.Uint32(data[off+4:])
	// A payload always has a group and a kind, so a zero length (what a
	// zero-filled tail reads as) is never well formed. The kind byte is
	// checked before the CRC: it refuses most garbage candidates cheaply
	// when recordAfter probes every offset.
	if n < payloadMin || n > maxRecord || n > len(data)-off-headerLen {
		return nil, false
	}
	payload = data[off+headerLen : off+headerLen+n]
	if k := kind(payload[8]); k == 0 || k >= kindEnd {
		return nil, false
	}
	return payload, crc32.Checksum(payload, castagnoli) == sum
}

// recordAfter reports whether a well-formed record starts at any byte from
// off on: damage followed by one is not a torn tail.
func recordAfter(data []byte, off int) bool {
	for ; off+headerLen < len(data); off++ {
		if _, ok := recordAt(data, off); ok {
			return true
		}
	}
	return false
}
