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
// and UDP now and lie outside the ephemeral port range: below it, or above
// it when the room there is larger. Where the range leaves no room either
// side (under 1,000 ports), it falls back to ports the kernel picks.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := outsideEphemeral()
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

// outsideEphemeral is the larger of the two port windows [lo, hi) outside
// the kernel's ephemeral range: below it (from lowestPort) or above it.
func outsideEphemeral() (lo, hi int) {
	first, last := ephemeralRange()
	if below, above := first-lowestPort, 65536-(last+1); above > below {
		return last + 1, 65536
	}
	return lowestPort, first
}

// ephemeralRange is the kernel's ephemeral port range (Linux's default
// when it cannot be read).
func ephemeralRange() (first, last int) {
	first, last = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return first, last
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return first, last
	}
	a, errA := strconv.Atoi(f[0])
	z, errZ := strconv.Atoi(f[1])
	if errA != nil || errZ != nil || a > z {
		return first, last
	}
	return a, z
}
