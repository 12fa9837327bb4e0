package peer

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestSetClusterIDBeforeStart: a transport that learns its cluster id
// after NewTCP talks to a peer of that cluster and is refused by a peer
// of another; once started, the id cannot change.
func TestSetClusterIDBeforeStart(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func(id uint64, cluster string) *TCPTransport {
		tr, err := NewTCP(Config{NodeID: id, ClusterID: cluster, ListenAddr: "127.0.0.1:0", Logger: quiet, RedialMin: time.Millisecond, RedialMax: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		if err := tr.Listen(); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	echo := func(_ context.Context, _ uint64, req []byte) ([]byte, error) { return req, nil }
	a, other := open(1, "cluster-a"), open(3, "cluster-b")
	late := open(2, "") // learns its id after NewTCP
	for _, tr := range []*TCPTransport{a, other} {
		if err := tr.HandleCall(ChannelForward, echo); err != nil {
			t.Fatal(err)
		}
	}
	if err := late.SetClusterID("cluster-a"); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []*TCPTransport{a, other, late} {
		if err := tr.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := late.SetClusterID("cluster-b"); err == nil {
		t.Fatal("SetClusterID after Start was accepted")
	}
	late.SetAddr(1, a.Addr())
	late.SetAddr(3, other.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := late.Call(ctx, 1, ChannelForward, []byte("hi")); err != nil || string(got) != "hi" {
		t.Fatalf("call to a node of the same cluster: %q, %v", got, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if _, err := late.Call(short, 3, ChannelForward, []byte("hi")); err == nil {
		t.Fatal("a node of another cluster answered")
	}
}
