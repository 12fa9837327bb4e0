// Fuzz targets for every decoder. Seeds come from the v1 vectors and the
// sample messages through f.Add, so plain `go test` runs them as a seed
// corpus. Properties: decoding never panics; errors wrap the package's
// sentinels; whatever decodes re-encodes to exactly the input.
package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func addRequestSeeds(f *testing.F, add func(frame []byte)) {
	for _, v := range loadVectors(f).Requests {
		add(v.frame(f))
	}
	for i, r := range append(sampleRequests(), extendedRequests()...) {
		add(AppendRequestFrame(nil, uint32(i), r))
	}
}

func FuzzDecodeRequest(f *testing.F) {
	addRequestSeeds(f, func(frame []byte) {
		key, _, payload, err := ParseRequestHeader(frame[LenPrefixSize:])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(key, payload)
	})
	f.Fuzz(func(t *testing.T, key uint16, payload []byte) {
		req, err := DecodeRequest(key, payload)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownAPIKey) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if req.APIKey() != key {
			t.Fatalf("decoded key %d as key %d", key, req.APIKey())
		}
		if again := req.AppendPayload(nil); !bytes.Equal(again, payload) {
			t.Fatalf("re-encoded %x, input %x", again, payload)
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	addRequestSeeds(f, func(frame []byte) { f.Add(frame) })
	for _, v := range loadVectors(f).Responses {
		f.Add(v.frame(f))
	}
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0, 1})
	const limit = 1 << 16
	f.Fuzz(func(t *testing.T, data []byte) {
		body, err := ReadFrame(bytes.NewReader(data), limit, nil)
		if err != nil {
			return
		}
		if len(body) > limit || len(data) < LenPrefixSize+len(body) {
			t.Fatalf("body of %d bytes from %d bytes of input", len(body), len(data))
		}
		frame := data[:LenPrefixSize+len(body)]
		key, corr, payload, err := ParseRequestHeader(body)
		if err != nil {
			return
		}
		req, err := DecodeRequest(key, payload)
		if err != nil {
			return
		}
		if again := AppendRequestFrame(nil, corr, req); !bytes.Equal(again, frame) {
			t.Fatalf("re-encoded %x, input %x", again, frame)
		}
	})
}

// FuzzDecodeResponse picks a response type by its first byte.
func FuzzDecodeResponse(f *testing.F) {
	kinds := sampleResponses()
	for i, r := range kinds {
		f.Add(uint8(i), r.AppendPayload(nil))
		for _, ext := range extendedResponses() {
			if reflect.TypeOf(ext) == reflect.TypeOf(r) {
				f.Add(uint8(i), ext.AppendPayload(nil))
			}
		}
	}
	for _, v := range loadVectors(f).Responses {
		_, _, payload, err := ParseResponse(v.frame(f)[LenPrefixSize:])
		if err != nil {
			f.Fatal(err)
		}
		for i := range kinds {
			f.Add(uint8(i), payload)
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, payload []byte) {
		r := reflect.New(reflect.TypeOf(kinds[int(kind)%len(kinds)]).Elem()).Interface().(responseDecoder)
		if err := r.Decode(payload); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if again := r.AppendPayload(nil); !bytes.Equal(again, payload) {
			t.Fatalf("%T re-encoded %x, input %x", r, again, payload)
		}
	})
}
