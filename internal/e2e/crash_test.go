package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// buildOnce builds the malachi binary once per test run.
var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "malachi-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "malachi")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/malachi-log/malachi/cmd/malachi").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// serveProcess is a real `malachi serve` child process.
type serveProcess struct {
	cmd  *exec.Cmd
	addr string
}

// startServe runs `malachi serve --dev` on dataDir and waits for its
// banner, which names the bound client address.
func startServe(t *testing.T, dataDir string, extra ...string) *serveProcess {
	t.Helper()
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--dev", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProcess{cmd: cmd}
	t.Cleanup(func() { p.kill() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 3 && f[0] == "client" && f[1] == "protocol" {
			p.addr = f[2]
		}
		if line == "ready" {
			break
		}
	}
	if p.addr == "" {
		t.Fatalf("serve did not report its address (%v)", sc.Err())
	}
	go func() { // keep draining so the child never blocks on a full pipe
		for sc.Scan() {
		}
	}()
	return p
}

func (p *serveProcess) kill() {
	if p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

// TestCrashKeepsAcknowledgedRecords kills a real node with SIGKILL while a
// client produces with pipelined requests, restarts it, and checks that
// every acknowledged record is readable exactly once, in per-key order.
func TestCrashKeepsAcknowledgedRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	dataDir := t.TempDir()
	p := startServe(t, dataDir, "--segment-max-bytes", "65536")
	c := dial(t, p.addr)
	c.auth("producer", "producer123")
	c.write(frame(1, 1, createTopicPayload("crash", 16)))
	c.expectOK(1)

	const keys, perBatch, window = 20, 10, 8
	sent := map[uint32][]rawRecord{} // correlation id -> records
	var acked []rawRecord
	var mu sync.Mutex
	done := make(chan struct{})
	ackedSignal := make(chan struct{}, 1)
	// The reader collects acknowledgements until the socket dies.
	go func() {
		defer close(done)
		for {
			corr, code, err := readResponse(c)
			if err != nil {
				return
			}
			if code == 0 {
				mu.Lock()
				acked = append(acked, sent[corr]...)
				mu.Unlock()
				select {
				case ackedSignal <- struct{}{}:
				default:
				}
			}
		}
	}()
	seq := 0
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	for corr := uint32(2); ; corr++ {
		var recs []rawRecord
		for i := 0; i < perBatch; i++ {
			recs = append(recs, rawRecord{key: sp(fmt.Sprintf("k%d", seq%keys)), value: fmt.Sprintf("%d", seq)})
			seq++
		}
		mu.Lock()
		sent[corr] = recs
		mu.Unlock()
		if _, err := c.nc.Write(frame(2, corr, producePayload("crash", recs))); err != nil {
			break
		}
		// Keep a bounded number of batches in flight.
	flow:
		for int(corr-1)*perBatch-ackedCount() > window*perBatch {
			select {
			case <-done:
				break flow
			case <-ackedSignal:
			}
		}
		if ackedCount() >= 3000 {
			p.kill() // SIGKILL mid-stream: more batches are in flight
			break
		}
	}
	<-done
	mu.Lock()
	want := append([]rawRecord(nil), acked...)
	mu.Unlock()

	p2 := startServe(t, dataDir)
	r := dial(t, p2.addr)
	r.auth("consumer", "consumer123")
	var got []rawRecord
	var cur *string
	for corr := uint32(2); ; corr++ {
		r.write(frame(3, corr, fetchPayload("crash", cur, nil, nil, 1000, 0)))
		page, next := readRecords(r.expectOK(corr))
		cur = next
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
	}
	seen := map[string]int{}
	lastPerKey := map[string]int{}
	for _, rec := range got {
		seen[rec.value]++
		var v int
		fmt.Sscanf(rec.value, "%d", &v)
		if prev, ok := lastPerKey[*rec.key]; ok && v <= prev {
			t.Fatalf("key %s: %d read after %d", *rec.key, v, prev)
		}
		lastPerKey[*rec.key] = v
	}
	for _, rec := range want {
		if seen[rec.value] != 1 {
			t.Fatalf("acknowledged record %s read %d times", rec.value, seen[rec.value])
		}
	}
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("record %s read %d times", v, n)
		}
	}
	t.Logf("acked %d records before SIGKILL, %d readable after restart", len(want), len(got))
}

// readResponse reads one response without failing the test when the
// connection dies (the node is killed under it).
func readResponse(c *rawConn) (uint32, uint16, error) {
	var hdr [4]byte
	if _, err := readFull(c, hdr[:]); err != nil {
		return 0, 0, err
	}
	n := int(hdr[0])<<24 | int(hdr[1])<<16 | int(hdr[2])<<8 | int(hdr[3])
	body := make([]byte, n)
	if _, err := readFull(c, body); err != nil {
		return 0, 0, err
	}
	d := &dec{b: body}
	return d.u32(), d.u16(), nil
}

func readFull(c *rawConn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.br.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
