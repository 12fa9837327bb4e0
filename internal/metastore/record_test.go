package metastore

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzScanRecords: scanning never panics; what it accepts re-encodes to
// the valid prefix byte for byte; and the bytes after that prefix never
// hold a well-formed record (else it must have reported corruption).
func FuzzScanRecords(f *testing.F) {
	one := appendRecord(nil, []byte(`{"v":1,"k":"create_topic","topic":"a"}`))
	two := appendRecord(append([]byte(nil), one...), []byte(`{"v":1,"k":"split_range","range":1}`))
	f.Add(two)
	f.Add(two[:len(two)-3])
	f.Add(append(append([]byte(nil), two...), 0, 0, 0, 0, 0, 0, 0, 0))
	f.Add(append([]byte{1, 0, 0, 0, 0, 0, 0, 0}, two...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		payloads, valid, err := scanRecords(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !recordAfter(data, 1) {
				t.Fatalf("error %v without a well-formed record to protect", err)
			}
			return
		}
		var again []byte
		for _, p := range payloads {
			again = appendRecord(again, p)
		}
		if !bytes.Equal(again, data[:valid]) {
			t.Fatal("accepted records do not re-encode to the valid prefix")
		}
		if valid < len(data) && recordAfter(data, valid+1) {
			t.Fatal("truncated a tail that holds a well-formed record")
		}
	})
}
