package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/membership"
	"github.com/malachi-log/malachi/internal/peer"
)

// Default ports of the node-to-node listeners, next to the client (4040)
// and HTTP (4041) ones.
const (
	defaultPeerPort   = "4042"
	defaultGossipPort = "4043"
)

// clusterFlags are serve's cluster settings. A node is a cluster member
// exactly when --node-id (or MALACHI_NODE_ID) is given; without it the
// node runs alone on its local metadata store, and such a node cannot be
// joined to a cluster later.
type clusterFlags struct {
	nodeID       string
	peerListen   string
	gossipListen string
	advertise    string
	join         []string
	attrs        []string
	vnodes       int
	factor       int
	segReplicas  int
	peerCert     string
	peerKey      string
	peerCA       string
	// autoRebalance and rebalanceStable turn the automatic rebalance on.
	autoRebalance   bool
	rebalanceStable time.Duration
	// Repair: the dead-after grace, the heal pass and its serving rate,
	// and the scrubber's pace. Rates are sizes per second ("32MiB").
	deadAfter, healInterval, scrubInterval time.Duration
	healRate, scrubRate                    string
	// nodeIDSet is true when --node-id came from the command line or
	// the environment: that is what turns cluster mode on.
	nodeIDSet bool
}

func (c *clusterFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&c.nodeID, "node-id", envString("MALACHI_NODE_ID", ""), "this node's number in a cluster (1, 2, ...); turns cluster mode on (env MALACHI_NODE_ID)")
	fl.StringVar(&c.peerListen, "peer-listen", envString("MALACHI_PEER_LISTEN", ":"+defaultPeerPort), "node-to-node address (Raft, forwarding); an empty host takes --listen's (env MALACHI_PEER_LISTEN)")
	fl.StringVar(&c.gossipListen, "gossip-listen", envString("MALACHI_GOSSIP_LISTEN", ":"+defaultGossipPort), "membership gossip address, UDP and TCP; an empty host takes --listen's (env MALACHI_GOSSIP_LISTEN)")
	fl.StringVar(&c.advertise, "advertise", envString("MALACHI_ADVERTISE", ""), "host other nodes and clients use to reach this one, in every advertised address; default --listen's host (env MALACHI_ADVERTISE)")
	fl.StringSliceVar(&c.join, "join", envList("MALACHI_JOIN"), "gossip addresses host:port of nodes already in the cluster, comma-separated; none: bootstrap a new cluster (env MALACHI_JOIN)")
	fl.StringArrayVar(&c.attrs, "attr", envList("MALACHI_ATTRS"), "placement attribute key=value, e.g. rack=a or zone=z1; repeatable (env MALACHI_ATTRS, comma-separated)")
	fl.IntVar(&c.vnodes, "vnodes", int(envInt("MALACHI_VNODES", 8)), "metadata shards a bootstrapping node creates; joining nodes learn it (env MALACHI_VNODES)")
	fl.IntVar(&c.factor, "replication-factor", int(envInt("MALACHI_REPLICATION_FACTOR", 3)), "metadata voters per vnode, clamped to the node count (env MALACHI_REPLICATION_FACTOR)")
	fl.IntVar(&c.segReplicas, "segment-replicas", int(envInt("MALACHI_SEGMENT_REPLICAS", 3)), "nodes that keep each new segment when its topic sets none (topic create --replicas), clamped to the node count; 1 keeps a segment on the node that opened it (env MALACHI_SEGMENT_REPLICAS)")
	fl.StringVar(&c.peerCert, "peer-tls-cert", envString("MALACHI_PEER_TLS_CERTFILE", ""), "PEM certificate this node presents to other nodes, naming it (CN node-N or URI SAN malachi-node://N) and its advertised host; with --peer-tls-key and --peer-tls-ca turns mutual TLS on (env MALACHI_PEER_TLS_CERTFILE)")
	fl.StringVar(&c.peerKey, "peer-tls-key", envString("MALACHI_PEER_TLS_KEYFILE", ""), "PEM private key of --peer-tls-cert (env MALACHI_PEER_TLS_KEYFILE)")
	fl.StringVar(&c.peerCA, "peer-tls-ca", envString("MALACHI_PEER_TLS_CAFILE", ""), "PEM CA every other node's certificate must chain to (env MALACHI_PEER_TLS_CAFILE)")
	fl.BoolVar(&c.autoRebalance, "auto-rebalance", envBool("MALACHI_AUTO_REBALANCE"), "apply the metadata rebalance plan without an operator once the nodes have been stable for --rebalance-stable; the cluster acts on the setting of the node leading the root group (env MALACHI_AUTO_REBALANCE)")
	fl.DurationVar(&c.rebalanceStable, "rebalance-stable", envDuration("MALACHI_REBALANCE_STABLE", 5*time.Minute), "how long the registered nodes, and which of them are live, must stay unchanged before --auto-rebalance acts (env MALACHI_REBALANCE_STABLE)")
	fl.DurationVar(&c.deadAfter, "dead-after", envDuration("MALACHI_DEAD_AFTER", broker.DefaultDeadAfter), "how long a node must be down (gossip: dead or left) before the sealed segments it held are copied to other nodes; shorter heals sooner, but copies whole segments for a node that was only restarting (env MALACHI_DEAD_AFTER)")
	fl.DurationVar(&c.healInterval, "heal-interval", envDuration("MALACHI_HEAL_INTERVAL", broker.DefaultHealInterval), "how often a node plans heals and deletes copies the metadata no longer lists (env MALACHI_HEAL_INTERVAL)")
	fl.StringVar(&c.healRate, "heal-rate", envString("MALACHI_HEAL_RATE", "32MiB"), "bytes per second a node serves to heals copying from it, e.g. 32MiB; bounds what repair takes from produce (env MALACHI_HEAL_RATE)")
	fl.DurationVar(&c.scrubInterval, "scrub-interval", envDuration("MALACHI_SCRUB_INTERVAL", broker.DefaultScrubInterval), "how often each sealed copy is verified again against its seal (env MALACHI_SCRUB_INTERVAL)")
	fl.StringVar(&c.scrubRate, "scrub-rate", envString("MALACHI_SCRUB_RATE", "8MiB"), "bytes per second the scrubber reads, e.g. 8MiB (env MALACHI_SCRUB_RATE)")
}

// envList reads a comma-separated list; empty items are dropped.
func envList(name string) []string {
	var out []string
	for _, s := range strings.Split(envString(name, ""), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// clusterSetting is what cluster mode adds to serve: the broker's
// configuration and the addresses to print.
type clusterSetting struct {
	cfg  *broker.ClusterConfig
	name string // the node's name in status and logs, "node-<id>"
}

// clusterConfig turns the flags into the broker's ClusterConfig, or nil
// when cluster mode is off. listen and http are serve's client and HTTP
// addresses, whose ports are advertised with the advertise host.
func (c *clusterFlags) clusterConfig(listen, http string) (*clusterSetting, error) {
	if !c.nodeIDSet {
		return nil, c.singleNodeMistake()
	}
	id, err := strconv.ParseUint(strings.TrimSpace(c.nodeID), 10, 64)
	if err != nil || id == 0 {
		return nil, usageErr("--node-id %q: want the node's number in the cluster, a positive integer (1, 2, 3, ...)", c.nodeID)
	}
	listenHost, _, err := splitPort("--listen", listen)
	if err != nil {
		return nil, err
	}
	host, err := c.advertiseHost(listenHost)
	if err != nil {
		return nil, err
	}
	cc := &broker.ClusterConfig{
		NodeID: id, Join: c.join, Vnodes: c.vnodes, Factor: c.factor, SegmentReplicas: c.segReplicas,
		AutoRebalance: c.autoRebalance, RebalanceStable: c.rebalanceStable,
	}
	if cc.PeerListen, cc.PeerAdvertise, err = listenPair("--peer-listen", c.peerListen, listenHost, host); err != nil {
		return nil, err
	}
	if cc.GossipListen, cc.GossipAdvertise, err = listenPair("--gossip-listen", c.gossipListen, listenHost, host); err != nil {
		return nil, err
	}
	if _, cc.ClientAdvertise, err = listenPair("--listen", listen, listenHost, host); err != nil {
		return nil, err
	}
	if _, cc.HTTPAdvertise, err = listenPair("--http", http, listenHost, host); err != nil {
		return nil, err
	}
	if cc.Attrs, err = parseAttrs(c.attrs); err != nil {
		return nil, err
	}
	if err := c.checkSizes(); err != nil {
		return nil, err
	}
	if cc.Heal, err = c.healConfig(); err != nil {
		return nil, err
	}
	if cc.PeerTLS, err = c.peerTLS(); err != nil {
		return nil, err
	}
	for _, j := range c.join {
		if _, _, err := splitPort("--join", j); err != nil {
			return nil, err
		}
	}
	return &clusterSetting{cfg: cc, name: "node-" + strconv.FormatUint(id, 10)}, nil
}

// singleNodeMistake refuses cluster flags given without --node-id: they
// would be ignored, and the node would start alone when a cluster was
// meant.
func (c *clusterFlags) singleNodeMistake() error {
	if len(c.join) > 0 || len(c.attrs) > 0 || c.advertise != "" || c.peerCert != "" || c.peerKey != "" || c.peerCA != "" || c.autoRebalance {
		return usageErr("--join, --attr, --advertise, --auto-rebalance and --peer-tls-* need --node-id: without it the node runs alone and cannot join a cluster")
	}
	return nil
}

func (c *clusterFlags) checkSizes() error {
	switch {
	case c.vnodes < 1 || c.vnodes > maxVnodes:
		return usageErr("--vnodes %d: want 1 to %d", c.vnodes, maxVnodes)
	case c.factor < 1:
		return usageErr("--replication-factor %d: want at least 1", c.factor)
	case c.segReplicas < 0 || c.segReplicas > maxSegmentReplicas:
		return usageErr("--segment-replicas %d: want 1 to %d (0: 3)", c.segReplicas, maxSegmentReplicas)
	case c.rebalanceStable < 0 || c.rebalanceStable == 0 && c.autoRebalance:
		// Zero would reach the control plane as "unset" and become its
		// 5 min default, not the "at once" it reads as.
		return usageErr("--rebalance-stable %s: want a positive duration such as 5m", c.rebalanceStable)
	}
	return nil
}

// healConfig checks and turns the repair flags into the broker's.
func (c *clusterFlags) healConfig() (broker.HealConfig, error) {
	hc := broker.HealConfig{DeadAfter: c.deadAfter, Interval: c.healInterval, ScrubInterval: c.scrubInterval}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--dead-after", c.deadAfter}, {"--heal-interval", c.healInterval}, {"--scrub-interval", c.scrubInterval}} {
		if d.v < 0 {
			return hc, usageErr("%s %s: want a positive duration such as 2m (0: the default)", d.flag, d.v)
		}
	}
	var err error
	if hc.Rate, err = rateFlag("--heal-rate", c.healRate); err != nil {
		return hc, err
	}
	if hc.ScrubRate, err = rateFlag("--scrub-rate", c.scrubRate); err != nil {
		return hc, err
	}
	return hc, nil
}

// maxRate bounds --heal-rate and --scrub-rate (the heal bucket's limit).
const maxRate = 1 << 30

// rateFlag parses a rate; "" is 0, the broker's default.
func rateFlag(flag, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := parseSize(strings.TrimSpace(strings.TrimSuffix(v, "/s")))
	if err != nil || n < 1 || n > maxRate {
		return 0, usageErr("%s %q: want bytes per second from 1 to 1GiB, such as 32MiB", flag, v)
	}
	return n, nil
}

// maxSegmentReplicas bounds --segment-replicas and topic create
// --replicas: the metadata's limit of replicas per segment.
const maxSegmentReplicas = 16

// maxVnodes bounds --vnodes: each vnode is a Raft group every node
// replicates, with a heartbeat per tick.
const maxVnodes = 1024

func (c *clusterFlags) peerTLS() (*tls.Config, error) {
	set := 0
	for _, f := range []string{c.peerCert, c.peerKey, c.peerCA} {
		if f != "" {
			set++
		}
	}
	switch set {
	case 0:
		return nil, nil
	case 3:
		cfg, err := peer.LoadMutualTLS(c.peerCert, c.peerKey, c.peerCA)
		if err != nil {
			return nil, fmt.Errorf("--peer-tls-cert/--peer-tls-key/--peer-tls-ca: %w", err)
		}
		return cfg, nil
	}
	return nil, usageErr("--peer-tls-cert, --peer-tls-key and --peer-tls-ca go together: give all three or none")
}

// advertiseHost is --advertise, or the --listen host when that names one
// address: a wildcard host cannot be dialled by other nodes.
func (c *clusterFlags) advertiseHost(listenHost string) (string, error) {
	host := strings.TrimSpace(c.advertise)
	if host == "" {
		if unspecifiedHost(listenHost) {
			return "", usageErr("--listen %q binds every interface: pass --advertise HOST, the address other nodes and clients reach this one at", listenHost)
		}
		return listenHost, nil
	}
	if strings.Contains(host, ":") && net.ParseIP(host) == nil || strings.ContainsAny(host, " /") {
		return "", usageErr("--advertise %q: want a host name or IP address, without a port", host)
	}
	if unspecifiedHost(host) {
		return "", usageErr("--advertise %q: other nodes cannot dial a wildcard address; give this node's own address", host)
	}
	return host, nil
}

func unspecifiedHost(h string) bool {
	if h == "" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsUnspecified()
}

// listenPair completes a listen address (an empty host takes --listen's)
// and the address to advertise for it: the advertise host with its port.
// Port 0 is refused: other nodes must know the port before it is bound.
func listenPair(flag, addr, listenHost, advertiseHost string) (listen, advertise string, err error) {
	h, port, err := splitPort(flag, addr)
	if err != nil {
		return "", "", err
	}
	if port == "0" {
		return "", "", usageErr("%s %q: a cluster node needs fixed ports, which other nodes and clients are told", flag, addr)
	}
	if h == "" {
		h = listenHost
	}
	return net.JoinHostPort(h, port), net.JoinHostPort(advertiseHost, port), nil
}

func splitPort(flag, addr string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(strings.TrimSpace(addr))
	if err != nil {
		return "", "", usageErr("%s %q: want host:port", flag, addr)
	}
	if n, perr := strconv.ParseUint(port, 10, 16); perr != nil || (n == 0 && port != "0") {
		return "", "", usageErr("%s %q: %q is not a port", flag, addr, port)
	}
	return host, port, nil
}

// parseAttrs reads key=value pairs, validated as membership advertises
// them, so that a bad one stops the start instead of the gossip.
func parseAttrs(list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(list))
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, usageErr("--attr %q: want key=value, e.g. rack=a", kv)
		}
		if _, dup := out[k]; dup {
			return nil, usageErr("--attr %s is given twice", k)
		}
		out[k] = v
	}
	if err := membership.ValidateAttributes(out); err != nil {
		return nil, usageErr("--attr: %v", err)
	}
	return out, nil
}

// printClusterBanner adds the cluster lines to serve's start-up banner.
func printClusterBanner(w io.Writer, s *clusterSetting) {
	c := s.cfg
	fmt.Fprintf(w, "  cluster node     %d\n", c.NodeID)
	fmt.Fprintf(w, "  peer             %s (advertised %s)\n", c.PeerListen, c.PeerAdvertise)
	fmt.Fprintf(w, "  gossip           %s (advertised %s)\n", c.GossipListen, c.GossipAdvertise)
	fmt.Fprintf(w, "  advertised       client %s, http %s\n", c.ClientAdvertise, c.HTTPAdvertise)
	if len(c.Join) > 0 {
		fmt.Fprintf(w, "  join             %s\n", strings.Join(c.Join, ","))
	} else {
		fmt.Fprintf(w, "  join             none: bootstraps a cluster on an empty data directory\n")
	}
	if len(c.Attrs) > 0 {
		pairs := make([]string, 0, len(c.Attrs))
		for _, k := range slices.Sorted(maps.Keys(c.Attrs)) {
			pairs = append(pairs, k+"="+c.Attrs[k])
		}
		fmt.Fprintf(w, "  attributes       %s\n", strings.Join(pairs, " "))
	}
	if c.PeerTLS != nil {
		fmt.Fprintf(w, "  peer tls         mutual, certificates verified\n")
	}
}
