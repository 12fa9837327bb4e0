package testenv

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Ports a test hands to a child process are chosen below the kernel's
// ephemeral range. A port from the ephemeral range (what listening on
// port 0 returns) can be taken between the test releasing it and the child
// binding it, by any outgoing connection of any process on the machine;
// with several test packages running at once that happens. Below the
// range only another explicit bind can take it, and within this process
// no port is handed out twice.
var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// lowestPort is the lowest port FreePorts considers: below it lie the
// well-known and commonly configured service ports.
const lowestPort = 10000

// FreePorts returns n distinct loopback ports that are free for both TCP
// and UDP now and lie outside the ephemeral port range when the machine
// leaves room below it; otherwise it falls back to ports the kernel picks.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := lowestPort, ephemeralLow()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		p := 0
		if hi-lo > 1000 && tries < 100*n {
			p = lo + rand.IntN(hi-lo)
			if portsGiven[p] {
				continue
			}
		}
		got, ok := bindBoth(p)
		if !ok {
			if tries > 200*n {
				t.Fatalf("no free loopback port after %d tries", tries)
			}
			continue
		}
		portsGiven[got] = true
		ports = append(ports, got)
	}
	return ports
}

// bindBoth checks that port p (0: any) is free for TCP and UDP on loopback
// and returns it.
func bindBoth(p int) (int, bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return 0, false
	}
	defer ln.Close()
	p = ln.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return 0, false
	}
	udp.Close()
	return p, true
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	v, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return v
}
