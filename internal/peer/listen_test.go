package peer

import (
	"context"
	"testing"
	"time"
)

// A node on port 0 learns its address from Listen before it registers its
// handlers, and Start then serves on that listener: a peer that dials the
// address reaches the handler registered after Listen.
func TestListenBeforeStart(t *testing.T) {
	tr, err := NewTCP(Config{NodeID: 1, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Listen(); err != nil {
		t.Fatal(err)
	}
	addr := tr.Addr()
	if addr == "" || addr == "127.0.0.1:0" {
		t.Fatalf("Listen left the address %q", addr)
	}
	if err := tr.Listen(); err != nil || tr.Addr() != addr {
		t.Fatalf("a second Listen: %v, address %q (was %q)", err, tr.Addr(), addr)
	}
	if err := tr.HandleCall(ChannelForward, func(_ context.Context, from uint64, req []byte) ([]byte, error) {
		return append([]byte("echo:"), req...), nil
	}); err != nil {
		t.Fatalf("registering after Listen: %v", err)
	}
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	if tr.Addr() != addr {
		t.Fatalf("Start moved the address from %q to %q", addr, tr.Addr())
	}
	other := newTCP(t, Config{NodeID: 2, ListenAddr: "127.0.0.1:0"}, nil)
	other.SetAddr(1, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := other.Call(ctx, 1, ChannelForward, []byte("hi"))
	if err != nil || string(got) != "echo:hi" {
		t.Fatalf("call: %q, %v", got, err)
	}
}

// Close after Listen without Start releases the port.
func TestListenThenClose(t *testing.T) {
	tr, err := NewTCP(Config{NodeID: 1, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Listen(); err != nil {
		t.Fatal(err)
	}
	addr := tr.Addr()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := NewTCP(Config{NodeID: 3, ListenAddr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.Listen(); err != nil {
		t.Fatalf("the port was not released: %v", err)
	}
	if err := tr.Listen(); err != ErrClosed {
		t.Fatalf("Listen after Close: %v", err)
	}
}
