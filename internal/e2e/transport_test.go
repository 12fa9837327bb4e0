package e2e

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/server"
)

// TestRawPreAuthFrameCap: until a connection has authenticated its frames
// are capped at 8 KiB — a 9 KiB auth frame is refused frame_too_large
// (correlation id 0) and the connection closed, and a bare length prefix
// of 16 MiB is refused without the body being waited for. After
// authentication the full frame cap applies.
func TestRawPreAuthFrameCap(t *testing.T) {
	addr := node(t, server.Config{})

	c := dial(t, addr)
	c.write(frame(0, 1, authPayload("admin", strings.Repeat("x", 9<<10))))
	c.expectError(0, "frame_too_large")
	c.expectClosed()

	d := dial(t, addr)
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], 16<<20)
	d.write(prefix[:])
	d.expectError(0, "frame_too_large")
	d.expectClosed()

	// An auth frame just under the cap is read and judged on its merits.
	e := dial(t, addr)
	e.write(frame(0, 2, authPayload("admin", strings.Repeat("x", 8<<10-64))))
	e.expectError(2, "invalid_credentials")

	a := dial(t, addr)
	a.auth("admin", "admin123")
	a.write(frame(1, 2, createTopicPayload("big", 8)))
	a.expectOK(2)
	a.write(frame(2, 3, producePayload("big", []rawRecord{{value: strings.Repeat("v", 1<<20)}})))
	if n := a.expectOK(3).u32(); n != 1 {
		t.Fatalf("produce count %d", n)
	}
}
