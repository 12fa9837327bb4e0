package segfile

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestRangeCRCMatchesChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 5*ckStep+123)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	w := &window{buf: data, start: 1000, size: 1000 + int64(len(data))}
	for range 500 {
		a := rng.IntN(len(data) + 1)
		b := a + rng.IntN(len(data)-a+1)
		want := crc32.Checksum(data[a:b], castagnoli)
		if got := w.rangeCRC(1000+int64(a), 1000+int64(b)); got != want {
			t.Fatalf("bytes %d-%d: crc %#08x, want %#08x", a, b, got, want)
		}
	}
	// The checkpoints follow the window when it moves.
	w.buf, w.start = data[ckStep+7:], 1000+ckStep+7
	if got, want := w.rangeCRC(w.start+10, w.start+3*ckStep), crc32.Checksum(w.buf[10:3*ckStep], castagnoli); got != want {
		t.Fatalf("after a move: crc %#08x, want %#08x", got, want)
	}
}
