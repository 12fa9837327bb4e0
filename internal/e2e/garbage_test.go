package e2e

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/malachi-log/malachi/internal/server"
)

// TestRawGarbageFramesKeepTheConnection sends frames with well-formed
// length prefixes but random bodies — random keys, truncated and padded
// payloads — to an authenticated connection. Each gets an answer (ok or
// an error reason) and the connection keeps serving a valid request
// afterwards; the node never drops it or crashes.
func TestRawGarbageFramesKeepTheConnection(t *testing.T) {
	addr := node(t, server.Config{})
	rng := rand.New(rand.NewPCG(7, 7))
	c := dial(t, addr)
	c.auth("admin", "admin123")
	c.write(frame(1, 2, createTopicPayload("junk", 8)))
	c.expectOK(2)
	// Keys that change state or switch modes are left out: subscribe
	// would turn the connection into a stream, and admin keys would
	// delete what the test relies on.
	keys := []uint16{0, 3, 4, 7, 11, 16, 64, 65, 70, 71, 72, 73, 17, 40, 999}
	for i := 0; i < 300; i++ {
		body := make([]byte, rng.IntN(64))
		for j := range body {
			body[j] = byte(rng.IntN(256))
		}
		corr := uint32(1000 + i)
		var e enc
		e.u32(uint32(6 + len(body)))
		e.u16(keys[rng.IntN(len(keys))])
		e.u32(corr)
		e.Write(body)
		c.write(e.Bytes())
		gotCorr, code, _ := c.read()
		if gotCorr != corr || code > 1 {
			t.Fatalf("frame %d: answered corr %d code %d", i, gotCorr, code)
		}
	}
	c.write(frame(72, 5, nil))
	c.expectOK(5)
	// A raw length prefix with nothing after it, then the socket closes:
	// the node just ends that connection.
	d := dial(t, addr)
	d.auth("admin", "admin123")
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 100)
	d.write(hdr[:])
	d.nc.Close()
	e := dial(t, addr)
	e.auth("admin", "admin123")
	e.write(frame(72, 6, nil))
	e.expectOK(6)
}
