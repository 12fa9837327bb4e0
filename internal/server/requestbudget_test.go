package server

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
	"github.com/malachi-log/malachi/internal/wire"
)

// syncGate holds every fsync of a broker's files while it is shut, so
// that produces cannot become durable.
type syncGate struct {
	shut atomic.Bool
	mu   sync.Mutex
	open chan struct{}
}

func newSyncGate() *syncGate { return &syncGate{open: make(chan struct{})} }

func (g *syncGate) rule(op vfs.Op, _ string) error {
	if op == vfs.OpSync && g.shut.Load() {
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		<-open
	}
	return nil
}

func (g *syncGate) close() { g.shut.Store(true) }

// release lets every held fsync through, now and after.
func (g *syncGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut.Swap(false) {
		close(g.open)
		g.open = make(chan struct{})
	}
}

// startGatedServer is startServer on a broker whose fsyncs g can hold.
func startGatedServer(t *testing.T, cfg Config, g *syncGate) *Server {
	t.Helper()
	lc := net.ListenConfig{Control: smallBuffers}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Open(context.Background(), broker.Config{DataDir: t.TempDir(), FS: vfs.NewFaulty(vfs.OS(), g.rule)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SeedUsers(context.Background(), true, ""); err != nil {
		t.Fatal(err)
	}
	s := New(cfg, b)
	if err := s.prepare(); err != nil {
		t.Fatal(err)
	}
	s.ln = smallListener{ln}
	served := make(chan struct{})
	go func() {
		defer close(served)
		s.Serve()
	}()
	t.Cleanup(func() {
		g.release()
		s.Shutdown(context.Background())
		<-served
		b.Close()
	})
	return s
}

// A client pipelining produce_batches faster than the disk makes them
// durable must not make the node hold more than MaxConnRequestBytes of
// its frames: the reader waits (TCP pushes back on the client) and reads
// on as earlier produces become durable. Nothing is refused: every
// produce is answered and stored. A frame larger than the whole bound is
// still read, alone.
func TestProduceFramesWaitForTheRequestBudget(t *testing.T) {
	for _, tc := range []struct {
		name         string
		limit        int64
		value        int
		maxAdmitted  int64 // produces the reader may admit while none is durable
		pipelineSize int
	}{
		{name: "several fit", limit: 256 << 10, value: 60 << 10, maxAdmitted: 4, pipelineSize: 20},
		{name: "each alone", limit: 64 << 10, value: 100 << 10, maxAdmitted: 1, pipelineSize: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newSyncGate()
			s := startGatedServer(t, Config{MaxConnRequestBytes: tc.limit}, g)
			c := dialClient(t, s)
			c.auth()
			c.createTopic(2, "t")
			var routes wire.TopicRoutesResponse
			c.request(3, &wire.TopicRoutesRequest{Topic: str("t")})
			if err := routes.Decode(c.answer(3)); err != nil {
				t.Fatal(err)
			}
			batch, err := segment.EncodeBatch(nil, 0, []segment.Record{{Value: make([]byte, tc.value), Timestamp: 1}}, segment.CodecNone)
			if err != nil {
				t.Fatal(err)
			}
			// One produce first, so the range's segment exists: creating it
			// waits for an fsync on the reader's own goroutine.
			c.request(4, &wire.ProduceBatchesRequest{Topic: str("t"), Batches: []wire.RangeBatch{{Range: routes.Ranges[0].Range, Batch: batch}}})
			c.answer(4)
			var frames []byte
			const first = 10
			for i := range tc.pipelineSize {
				frames = wire.AppendRequestFrame(frames, uint32(first+i), &wire.ProduceBatchesRequest{
					Topic: str("t"), Batches: []wire.RangeBatch{{Range: routes.Ranges[0].Range, Batch: batch}},
				})
			}
			// A frame is charged the pooled buffer it is read into; one
			// larger than the bound is read alone.
			bound := max(tc.limit, int64(frameCap(len(frames)/tc.pipelineSize-wire.LenPrefixSize)))
			sc := onlyConn(t, s)
			admittedBefore := sc.admitted.Load()

			g.close()
			pipeline(t, c, frames)
			held := func() int64 { h, _, _ := sc.requests.snapshot(); return h }
			within := func() {
				if h := held(); h > bound {
					t.Fatalf("the connection holds %d bytes of request frames, bound %d", h, tc.limit)
				}
			}
			waitFor(t, "the reader to wait for the request budget", within, func() bool {
				_, _, waiting := sc.requests.snapshot()
				return waiting == 1
			})
			if n := sc.admitted.Load() - admittedBefore; n < 1 || n > tc.maxAdmitted {
				t.Fatalf("%d produces admitted while none is durable, want 1 to %d", n, tc.maxAdmitted)
			}

			g.release()
			for i := range tc.pipelineSize {
				var pr wire.ProduceBatchesResponse
				if err := pr.Decode(c.answer(uint32(first + i))); err != nil || pr.Count != 1 {
					t.Fatalf("produce %d: %+v %v", i, pr, err)
				}
			}
			waitFor(t, "every frame to be given back", within, func() bool { return held() == 0 })
			if _, peak, _ := sc.requests.snapshot(); peak > bound {
				t.Fatalf("peak of %d bytes of request frames, bound %d", peak, tc.limit)
			}
			stored := 0
			var cursor *string
			for corr := uint32(100); ; corr++ {
				var fr wire.FetchBatchesResponse
				c.request(corr, &wire.FetchBatchesRequest{Topic: str("t"), Cursor: cursor})
				if err := fr.Decode(c.answer(corr)); err != nil {
					t.Fatal(err)
				}
				if len(fr.Batches) == 0 {
					break
				}
				for _, b := range fr.Batches {
					h, err := segment.ParseHeader(b.Batch)
					if err != nil {
						t.Fatal(err)
					}
					stored += int(h.RecordCount)
				}
				cursor = fr.NextCursor
			}
			if stored != 1+tc.pipelineSize {
				t.Fatalf("%d records stored, want %d", stored, 1+tc.pipelineSize)
			}
		})
	}
}
