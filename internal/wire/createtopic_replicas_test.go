package wire

import (
	"encoding/hex"
	"errors"
	"testing"
)

// create_topic_ex's optional replication factor: a present zero is not
// the canonical encoding of "none" and is refused.
func TestCreateTopicExRefusesAPresentZeroReplicas(t *testing.T) {
	payload, err := hex.DecodeString("01000000066f726465727310000000" + "0400")
	if err != nil {
		t.Fatal(err)
	}
	var r CreateTopicExRequest
	if err := r.Decode(payload); !errors.Is(err, ErrMalformed) {
		t.Fatalf("decode with replicas present and zero: %v, want malformed", err)
	}
	if err := r.Decode(payload[:len(payload)-1]); err != nil || r.Replicas != 0 || r.Ranges != 4 {
		t.Fatalf("decode without replicas: %+v, %v", r, err)
	}
}
