package peer

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
)

// Frames larger than the socket buffers, sent while the receiver stalls
// and then as it drains, are written in parts by the kernel: every frame
// of one sender still arrives whole and in order, beside another
// sender's small frames.
func TestLargeFramesStayWholeAndOrdered(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	box := newInbox()
	deliver := box.handler(ChannelReplication)
	ts := startTCP(t, 2, nil, func(tr Transport) {
		err := tr.Handle(ChannelReplication, func(from uint64, p []byte) {
			once.Do(func() { <-release }) // the first frame stalls the reader
			deliver(from, p)
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	frame := func(sender byte, seq, size int) []byte {
		p := make([]byte, size)
		p[0] = sender
		binary.BigEndian.PutUint32(p[1:], uint32(seq))
		for i := 5; i < size; i++ {
			p[i] = byte(seq*31 + i)
		}
		return p
	}
	const large, perSender = 3 << 20, 24
	var wg sync.WaitGroup
	wg.Go(func() {
		for seq := range perSender {
			size := 64
			if seq%2 == 0 {
				size = large
			}
			sendRetrying(t, ts[0], 2, ChannelReplication, frame(0, seq, size))
			if seq == 4 {
				close(release)
			}
		}
	})
	wg.Go(func() {
		for seq := range perSender {
			sendRetrying(t, ts[0], 2, ChannelReplication, frame(1, seq, 16))
		}
	})
	wg.Wait()
	waitFor(t, "every frame", func() bool { return box.count(1, ChannelReplication) == 2*perSender })
	next := [2]int{}
	for _, p := range box.get(1, ChannelReplication) {
		s, seq := p[0], int(binary.BigEndian.Uint32(p[1:]))
		if seq != next[s] {
			t.Fatalf("sender %d: frame %d arrived where %d was due", s, seq, next[s])
		}
		if want := frame(s, seq, len(p)); !bytes.Equal(p, want) || s == 0 && seq%2 == 0 && len(p) != large {
			t.Fatalf("sender %d: frame %d arrived altered (%d bytes)", s, seq, len(p))
		}
		next[s]++
	}
}
