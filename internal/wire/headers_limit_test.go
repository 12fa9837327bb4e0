package wire

import (
	"strings"
	"testing"
)

// TestHeaderLimits: a produce whose records carry more headers than the
// limits is refused as malformed, whatever it fits in; one at the limits
// decodes.
func TestHeaderLimits(t *testing.T) {
	topic := "t"
	rec := func(n int) Record {
		hs := make([]Header, n)
		for i := range hs {
			hs[i] = Header{Key: []byte{}, Value: []byte{}}
		}
		return Record{Key: []byte("k"), Value: []byte("v"), Headers: hs}
	}
	for name, tc := range map[string]struct {
		recs []Record
		ok   bool
	}{
		"at the per-record limit":   {[]Record{rec(MaxHeadersPerRecord)}, true},
		"over the per-record limit": {[]Record{rec(MaxHeadersPerRecord + 1)}, false},
		"over the per-request limit": {func() []Record {
			var rs []Record
			for i := 0; i <= MaxHeadersPerRequest/MaxHeadersPerRecord; i++ {
				rs = append(rs, rec(MaxHeadersPerRecord))
			}
			return rs
		}(), false},
	} {
		t.Run(name, func(t *testing.T) {
			body := ProduceRequest{Topic: &topic, Records: tc.recs}.AppendPayload(nil)
			var got ProduceRequest
			err := got.Decode(body)
			if tc.ok != (err == nil) {
				t.Fatalf("decode: %v", err)
			}
			if err != nil && !strings.Contains(err.Error(), "too many headers") {
				t.Fatalf("refusal does not say why: %v", err)
			}
		})
	}
}
