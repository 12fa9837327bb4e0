package main

import (
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// The repair flags reach the broker's HealConfig; zero values leave the
// broker's defaults, and a bad value names its flag.
func TestClusterHealFlags(t *testing.T) {
	base := clusterFlags{nodeID: "1", nodeIDSet: true, peerListen: ":4052", gossipListen: ":4053", vnodes: 8, factor: 3, advertise: "10.0.0.2"}
	f := base
	f.deadAfter, f.healInterval, f.scrubInterval = 30*time.Second, 5*time.Second, time.Hour
	f.healRate, f.scrubRate = "16MiB", "1MiB/s"
	got, err := f.clusterConfig("0.0.0.0:4050", "0.0.0.0:4051")
	if err != nil {
		t.Fatal(err)
	}
	want := broker.HealConfig{DeadAfter: 30 * time.Second, Interval: 5 * time.Second, Rate: 16 << 20, ScrubInterval: time.Hour, ScrubRate: 1 << 20}
	if got.cfg.Heal != want {
		t.Fatalf("heal config %+v, want %+v", got.cfg.Heal, want)
	}
	for name, tc := range map[string]struct {
		set  func(*clusterFlags)
		want string
	}{
		"negative dead-after": {func(f *clusterFlags) { f.deadAfter = -time.Second }, "--dead-after"},
		"rate not a size":     {func(f *clusterFlags) { f.healRate = "fast" }, "--heal-rate"},
		"zero rate":           {func(f *clusterFlags) { f.scrubRate = "0" }, "--scrub-rate"},
		"rate too high":       {func(f *clusterFlags) { f.healRate = "2GiB" }, "--heal-rate"},
	} {
		f := base
		tc.set(&f)
		if _, err := f.clusterConfig("0.0.0.0:4050", "0.0.0.0:4051"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, tc.want)
		}
	}
}
