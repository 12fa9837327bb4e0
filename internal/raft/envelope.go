package raft

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// An entry's data is an envelope: the proposing host's incarnation and a
// sequence number, then the state machine's payload. The pair matches an
// applied entry to the waiter that proposed it; the incarnation (random per
// Host) keeps a sequence number reused after a restart from completing the
// wrong waiter when old entries are applied again.
//
//	version:1 incarnation:8 seq:uvarint payload...
const envelopeVersion = 1

type envelope struct {
	incarnation uint64
	seq         uint64
	payload     []byte
}

func (e envelope) encode() []byte {
	b := make([]byte, 0, 1+8+binary.MaxVarintLen64+len(e.payload))
	b = append(b, envelopeVersion)
	b = binary.BigEndian.AppendUint64(b, e.incarnation)
	b = binary.AppendUvarint(b, e.seq)
	return append(b, e.payload...)
}

var errBadEnvelope = errors.New("raft: unreadable entry envelope")

func decodeEnvelope(b []byte) (envelope, error) {
	if len(b) > 0 && b[0] != envelopeVersion {
		return envelope{}, fmt.Errorf("%w: version %d, this build reads version %d", errBadEnvelope, b[0], envelopeVersion)
	}
	if len(b) < 1+8+1 {
		return envelope{}, errBadEnvelope
	}
	e := envelope{incarnation: binary.BigEndian.Uint64(b[1:9])}
	seq, n := binary.Uvarint(b[9:])
	if n <= 0 {
		return envelope{}, errBadEnvelope
	}
	e.seq = seq
	e.payload = b[9+n:]
	return e, nil
}
