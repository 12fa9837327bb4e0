package main

import (
	"bufio"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

func TestParseCounts(t *testing.T) {
	got, err := parseCounts("1000, 10000")
	if err != nil || len(got) != 2 || got[0] != 1000 || got[1] != 10000 {
		t.Fatalf("parseCounts: %v %v", got, err)
	}
	for _, bad := range []string{"", "0", "10,5", "10,10", "x"} {
		if _, err := parseCounts(bad); err == nil {
			t.Errorf("parseCounts(%q) accepted", bad)
		}
	}
}

// TestIdleAndWakeOnANode runs the Malachi side against a real node in
// this process: a password login, resumed sessions, parked long polls
// and one produce that answers every one of them.
func TestIdleAndWakeOnANode(t *testing.T) {
	n := clienttest.Start(t)
	pid := strconv.Itoa(os.Getpid())
	if err := runIdle(t.Context(), []string{"-addr", n.Addr(), "-pid", pid, "-counts", "3,12", "-wake", "-settle", "1ms"}); err != nil {
		t.Fatal(err)
	}
}

// TestNATSSubscriber: against a scripted NATS server, a subscriber logs
// in with user and password, subscribes, answers the server's PING and
// reports a message's arrival.
func TestNATSSubscriber(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	server := make(chan error, 1)
	go func() { server <- scriptedNATS(ln) }()

	c, err := dialNATS(t.Context(), ln.Addr().String(), nil, wakeTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := <-server; err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no message reported")
	}
}

// scriptedNATS serves one connection: INFO; CONNECT with the bench's
// credentials, SUB and PING, answered PONG; then a PING of its own, which
// must be answered, and one MSG.
func scriptedNATS(ln net.Listener) error {
	nc, err := ln.Accept()
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	expect := func(prefix string) (string, error) {
		l, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(l, prefix) {
			return l, &protoError{want: prefix, got: l, err: err}
		}
		return l, nil
	}
	if _, err := nc.Write([]byte("INFO {\"server_id\":\"x\"}\r\n")); err != nil {
		return err
	}
	l, err := expect("CONNECT ")
	if err != nil {
		return err
	}
	if !strings.Contains(l, `"user":"app"`) || !strings.Contains(l, `"pass":"app123"`) {
		return &protoError{want: "credentials", got: l}
	}
	if _, err := expect("SUB " + wakeTopic + " 1"); err != nil {
		return err
	}
	if _, err := expect("PING"); err != nil {
		return err
	}
	if _, err := nc.Write([]byte("PONG\r\nPING\r\n")); err != nil {
		return err
	}
	if _, err := expect("PONG"); err != nil {
		return err
	}
	_, err = nc.Write([]byte("MSG " + wakeTopic + " 1 7\r\nwake up\r\n"))
	return err
}

type protoError struct {
	want, got string
	err       error
}

func (e *protoError) Error() string {
	return "want " + e.want + ", got " + strings.TrimSpace(e.got) + errText(e.err)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}
