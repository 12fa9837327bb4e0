package control

// Real time, real disks, real sockets: three nodes with the durable raft
// log (internal/raft/logstore) in temporary directories, talking over
// loopback TCP, form a cluster, take writes through every node, stop, and
// come back with everything they committed.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/vfs"
)

// freeAddrs reserves loopback ports by listening and closing: the node
// must know its address before its transport starts.
func freeAddrs(t testing.TB, n int) map[uint64]string {
	addrs := map[uint64]string{}
	for id := uint64(1); id <= uint64(n); id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[id] = ln.Addr().String()
		ln.Close()
	}
	return addrs
}

type tcpNode struct {
	n  *Node
	tr *peer.TCPTransport
}

func openTCPNode(t testing.TB, id uint64, addrs map[uint64]string, root string, bootstrap bool) tcpNode {
	t.Helper()
	return openTCPNodeWith(t, id, addrs, root, bootstrap, 4, 20*time.Millisecond)
}

func openTCPNodeWith(t testing.TB, id uint64, addrs map[uint64]string, root string, bootstrap bool, vnodes int, tick time.Duration) tcpNode {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr, err := peer.NewTCP(peer.Config{NodeID: id, ListenAddr: addrs[id], ClusterID: "tcp-test", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	n, err := Open(context.Background(), Config{
		NodeID: id, Addr: addrs[id], FS: vfs.OS(), Dir: filepath.Join(root, fmt.Sprint(id)), Transport: tr,
		Bootstrap: bootstrap, Vnodes: vnodes, ClusterSecret: testSecret, Seeds: addrs,
		Clock: clock.Real(), TickInterval: tick, ReconcileTicks: 2, Logger: quiet,
	})
	if err != nil {
		t.Fatalf("node %d: open: %v", id, err)
	}
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	return tcpNode{n: n, tr: tr}
}

func (tn tcpNode) close(t testing.TB) {
	if err := tn.n.Close(); err != nil {
		t.Errorf("close node %d: %v", tn.n.ID(), err)
	}
	tn.tr.Close()
}

// waitReal waits in real time, polling with a ticker, up to a deadline.
func waitReal(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	tk := time.NewTicker(5 * time.Millisecond)
	defer tk.Stop()
	deadline := time.After(d)
	for !cond() {
		select {
		case <-tk.C:
		case <-deadline:
			t.Fatalf("%s did not happen within %v", what, d)
		}
	}
}

func allPlaced(nodes map[uint64]tcpNode) bool {
	for _, tn := range nodes {
		reg, err := tn.n.Registry()
		if err != nil || len(reg.Nodes) != len(nodes) {
			return false
		}
		for _, g := range tn.n.Status().Groups {
			if g.Leader == 0 || !slices.Equal(g.Voters, g.Placed) || len(g.Voters)+len(g.Learners) != len(nodes) {
				return false
			}
		}
	}
	return true
}

func TestDurableLogOverTCP(t *testing.T) {
	addrs := freeAddrs(t, 3)
	root := t.TempDir()
	nodes := map[uint64]tcpNode{1: openTCPNode(t, 1, addrs, root, true)}
	defer func() {
		for _, tn := range nodes {
			tn.close(t)
		}
	}()
	for _, id := range []uint64{2, 3} {
		nodes[id] = openTCPNode(t, id, addrs, root, false)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := nodes[id].n.Join(ctx)
		cancel()
		if err != nil {
			t.Fatalf("node %d: join: %v", id, err)
		}
	}
	waitReal(t, "three voters in every group", 60*time.Second, func() bool { return allPlaced(nodes) })

	var names []string
	for i := range 9 {
		name := fmt.Sprintf("durable-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := nodes[uint64(i%3+1)].n.Apply(ctx, metadata.Command{V: metadata.Version, Kind: metadata.KindCreateTopic, Topic: name})
		cancel()
		if err != nil || res.Err != nil {
			t.Fatalf("create %s: %v %v", name, err, res.Err)
		}
		names = append(names, name)
	}
	for id, tn := range nodes {
		tn.close(t)
		delete(nodes, id)
	}

	// Back from disk: node 1 keeps its Bootstrap flag, which a log that
	// holds groups ignores.
	for id := uint64(1); id <= 3; id++ {
		nodes[id] = openTCPNode(t, id, addrs, root, id == 1)
	}
	waitReal(t, "the cluster back", 60*time.Second, func() bool { return allPlaced(nodes) })
	for id, tn := range nodes {
		for _, name := range names {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := tn.n.BarrierTopic(ctx, name)
			cancel()
			if err != nil {
				t.Fatalf("node %d: barrier: %v", id, err)
			}
			var ok bool
			_ = tn.n.ViewTopicName(name, func(st *metadata.State) { _, ok = st.Topic(name) })
			if !ok {
				t.Errorf("node %d lost topic %s across the restart", id, name)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if res, err := nodes[2].n.Apply(ctx, metadata.Command{V: metadata.Version, Kind: metadata.KindCreateTopic, Topic: "after-restart"}); err != nil || res.Err != nil {
		t.Fatalf("create after restart: %v %v", err, res.Err)
	}
}
