package main

// Serve's cluster flags become the broker's ClusterConfig: addresses are
// completed and advertised under one host, and mistakes stop the start
// with a message that names the flag, before anything is opened.

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

func TestClusterFlagsBuildTheConfig(t *testing.T) {
	f := clusterFlags{
		nodeID: "2", nodeIDSet: true, peerListen: ":4052", gossipListen: ":4053",
		join: []string{"10.0.0.1:4043"}, attrs: []string{"rack=a", "zone=z1"}, vnodes: 16, factor: 3,
		advertise: "10.0.0.2",
	}
	got, err := f.clusterConfig("0.0.0.0:4050", "0.0.0.0:4051")
	if err != nil {
		t.Fatal(err)
	}
	want := &broker.ClusterConfig{
		NodeID: 2, PeerListen: "0.0.0.0:4052", PeerAdvertise: "10.0.0.2:4052",
		GossipListen: "0.0.0.0:4053", GossipAdvertise: "10.0.0.2:4053",
		ClientAdvertise: "10.0.0.2:4050", HTTPAdvertise: "10.0.0.2:4051",
		Join: []string{"10.0.0.1:4043"}, Attrs: map[string]string{"rack": "a", "zone": "z1"},
		Vnodes: 16, Factor: 3,
	}
	if !reflect.DeepEqual(got.cfg, want) || got.name != "node-2" {
		t.Errorf("got %+v (%s)\nwant %+v", got.cfg, got.name, want)
	}
}

func TestClusterFlagsAdvertiseTheListenHost(t *testing.T) {
	f := clusterFlags{nodeID: "1", nodeIDSet: true, peerListen: ":4042", gossipListen: "127.0.0.1:4043", vnodes: 8, factor: 3}
	got, err := f.clusterConfig("127.0.0.1:4040", "127.0.0.1:4041")
	if err != nil {
		t.Fatal(err)
	}
	c := got.cfg
	if c.PeerListen != "127.0.0.1:4042" || c.PeerAdvertise != "127.0.0.1:4042" || c.GossipAdvertise != "127.0.0.1:4043" ||
		c.ClientAdvertise != "127.0.0.1:4040" || c.HTTPAdvertise != "127.0.0.1:4041" || len(c.Join) != 0 || c.PeerTLS != nil {
		t.Errorf("%+v", c)
	}
}

func TestClusterFlagsOffWithoutNodeID(t *testing.T) {
	f := clusterFlags{peerListen: ":4042", gossipListen: ":4043", vnodes: 8, factor: 3}
	got, err := f.clusterConfig("127.0.0.1:4040", "127.0.0.1:4041")
	if got != nil || err != nil {
		t.Fatalf("%+v, %v: want single-node mode", got, err)
	}
}

func TestClusterFlagMistakes(t *testing.T) {
	dir := t.TempDir()
	cert := filepath.Join(dir, "cert.pem")
	if err := os.WriteFile(cert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := func() clusterFlags {
		return clusterFlags{nodeID: "1", nodeIDSet: true, peerListen: ":4042", gossipListen: ":4043", vnodes: 8, factor: 3}
	}
	cases := []struct {
		name   string
		change func(*clusterFlags)
		listen string
		want   string
	}{
		{"join without a node id", func(f *clusterFlags) { f.nodeIDSet, f.join = false, []string{"h:4043"} }, "", "need --node-id"},
		{"a name for an id", func(f *clusterFlags) { f.nodeID = "node-1" }, "", "positive integer"},
		{"id zero", func(f *clusterFlags) { f.nodeID = "0" }, "", "positive integer"},
		{"wildcard listen", nil, "0.0.0.0:4040", "pass --advertise"},
		{"wildcard listen, v6", nil, "[::]:4040", "pass --advertise"},
		{"empty listen host", nil, ":4040", "pass --advertise"},
		{"wildcard advertise", func(f *clusterFlags) { f.advertise = "0.0.0.0" }, "", "wildcard"},
		{"advertise with a port", func(f *clusterFlags) { f.advertise = "h:1" }, "", "without a port"},
		{"port zero", func(f *clusterFlags) { f.peerListen = ":0" }, "", "fixed ports"},
		{"no port", func(f *clusterFlags) { f.gossipListen = "localhost" }, "", "want host:port"},
		{"bad join", func(f *clusterFlags) { f.join = []string{"h"} }, "", "--join"},
		{"attr without =", func(f *clusterFlags) { f.attrs = []string{"rack"} }, "", "key=value"},
		{"attr twice", func(f *clusterFlags) { f.attrs = []string{"rack=a", "rack=b"} }, "", "twice"},
		{"attr bad key", func(f *clusterFlags) { f.attrs = []string{"Rack=a"} }, "", "attribute key"},
		{"vnodes", func(f *clusterFlags) { f.vnodes = 0 }, "", "--vnodes"},
		{"factor", func(f *clusterFlags) { f.factor = 0 }, "", "--replication-factor"},
		{"auto-rebalance without a node id", func(f *clusterFlags) { f.nodeIDSet, f.autoRebalance = false, true }, "", "need --node-id"},
		{"negative stable period", func(f *clusterFlags) { f.rebalanceStable = -time.Second }, "", "--rebalance-stable"},
		{"zero stable period", func(f *clusterFlags) { f.autoRebalance = true }, "", "--rebalance-stable"},
		{"half the TLS files", func(f *clusterFlags) { f.peerCert, f.peerKey = cert, cert }, "", "all three or none"},
		{"unreadable TLS files", func(f *clusterFlags) { f.peerCert, f.peerKey, f.peerCA = cert, cert, cert }, "", "peer-tls"},
	}
	for _, tc := range cases {
		f := base()
		if tc.change != nil {
			tc.change(&f)
		}
		listen := tc.listen
		if listen == "" {
			listen = "127.0.0.1:4040"
		}
		_, err := f.clusterConfig(listen, "127.0.0.1:4041")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %q", tc.name, err, tc.want)
		}
	}
}

// TestClusterFlagsFromEnvironment: every cluster flag has a MALACHI_*
// variable; a set MALACHI_NODE_ID turns cluster mode on as --node-id does.
func TestClusterFlagsFromEnvironment(t *testing.T) {
	for k, v := range map[string]string{
		"MALACHI_NODE_ID": "3", "MALACHI_PEER_LISTEN": ":5042", "MALACHI_GOSSIP_LISTEN": ":5043",
		"MALACHI_ADVERTISE": "10.1.1.1", "MALACHI_JOIN": "10.1.1.2:5043, 10.1.1.3:5043",
		"MALACHI_ATTRS": "rack=b,zone=z2", "MALACHI_VNODES": "64", "MALACHI_REPLICATION_FACTOR": "5",
		"MALACHI_AUTO_REBALANCE": "true", "MALACHI_REBALANCE_STABLE": "90s",
	} {
		t.Setenv(k, v)
	}
	cmd, f := newServeCommand()
	if err := cmd.Flags().Parse(nil); err != nil {
		t.Fatal(err)
	}
	cf := f.cluster
	cf.nodeIDSet = os.Getenv("MALACHI_NODE_ID") != ""
	got, err := cf.clusterConfig("0.0.0.0:5040", "0.0.0.0:5041")
	if err != nil {
		t.Fatal(err)
	}
	c := got.cfg
	if c.NodeID != 3 || c.PeerAdvertise != "10.1.1.1:5042" || c.GossipListen != "0.0.0.0:5043" ||
		!reflect.DeepEqual(c.Join, []string{"10.1.1.2:5043", "10.1.1.3:5043"}) ||
		!reflect.DeepEqual(c.Attrs, map[string]string{"rack": "b", "zone": "z2"}) || c.Vnodes != 64 || c.Factor != 5 ||
		!c.AutoRebalance || c.RebalanceStable != 90*time.Second {
		t.Errorf("%+v", c)
	}
}
