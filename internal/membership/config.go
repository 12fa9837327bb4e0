package membership

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"
)

// Config configures the memberlist-backed implementation. Zero durations
// and counts take the LAN defaults below (memberlist's DefaultLANConfig,
// which tolerates a busy host: a dead node is declared within a few
// seconds).
type Config struct {
	// Node is what the local node advertises; Node.ID must be unique in
	// the cluster and is also the memberlist node name ("node-<id>").
	Node NodeInfo
	// BindAddr is the gossip listener, host:port (--gossip-listen). The
	// port serves both UDP and TCP; port 0 lets the kernel choose one
	// that is free for both (memberlist retries until UDP matches TCP).
	BindAddr string
	// AdvertiseAddr, host:port, is the gossip address other nodes use;
	// empty means the bound address.
	AdvertiseAddr string
	// Join lists seed gossip addresses; Join(ctx, nil) contacts these.
	Join []string
	// ClusterName labels every packet and stream; nodes with another name
	// ignore them. It keeps clusters on one network apart but is not a
	// secret: anyone who can reach the port can send it.
	ClusterName string
	// SecretKey (16, 24 or 32 bytes: AES-128/192/256-GCM) encrypts and
	// authenticates all gossip. Every node needs the same key. Empty
	// means gossip travels in the clear.
	SecretKey []byte

	// ProbeInterval is how often a random member is probed, ProbeTimeout
	// how long an ack may take (about the 99th percentile RTT).
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// SuspicionMult scales how long a suspect has to refute before it is
	// declared dead: SuspicionMult × max(1, log10(members)) × ProbeInterval.
	SuspicionMult int
	// GossipInterval paces gossip of queued messages; PushPullInterval
	// full state syncs over TCP.
	GossipInterval   time.Duration
	PushPullInterval time.Duration
	// StreamTimeout bounds TCP connects, reads and writes (joins, syncs).
	StreamTimeout time.Duration
	// DeadRetention is how long a dead member is still gossiped to, so it
	// can refute a false accusation.
	DeadRetention time.Duration
	// BroadcastTimeout bounds SetAttributes and Leave waiting for their
	// announcement to go out, when the context has no earlier deadline.
	BroadcastTimeout time.Duration

	// MaxMembers bounds the member table; new nodes beyond it are refused
	// (departed members are evicted first).
	MaxMembers int
	// EventBuffer is the capacity of the Events channel.
	EventBuffer int
	// Logger receives this package's logs; memberlist's own lines go to
	// it at debug level. Nil means slog.Default().
	Logger *slog.Logger
}

// Defaults and bounds.
const (
	DefaultBindAddr   = "0.0.0.0:4043"
	DefaultMaxMembers = 1024
	MaxMaxMembers     = 1 << 16
	DefaultEventBuf   = 256
	MaxEventBuf       = 1 << 16
)

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.BindAddr == "" {
		c.BindAddr = DefaultBindAddr
	}
	set(&c.ProbeInterval, time.Second)
	set(&c.ProbeTimeout, 500*time.Millisecond)
	set(&c.GossipInterval, 200*time.Millisecond)
	set(&c.PushPullInterval, 30*time.Second)
	set(&c.StreamTimeout, 10*time.Second)
	set(&c.DeadRetention, 30*time.Second)
	set(&c.BroadcastTimeout, 5*time.Second)
	if c.SuspicionMult == 0 {
		c.SuspicionMult = 4
	}
	if c.MaxMembers == 0 {
		c.MaxMembers = DefaultMaxMembers
	}
	if c.EventBuffer == 0 {
		c.EventBuffer = DefaultEventBuf
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate checks a config after withDefaults.
func (c Config) validate() error {
	if _, err := encodeMeta(c.Node, false); err != nil {
		return err
	}
	if host, _, err := splitHostPort(c.BindAddr); err != nil || net.ParseIP(host) == nil {
		if err == nil {
			err = fmt.Errorf("want an IP address")
		}
		return fmt.Errorf("membership: bind address %q: %w", c.BindAddr, err)
	}
	if c.AdvertiseAddr != "" {
		host, port, err := splitHostPort(c.AdvertiseAddr)
		if err == nil && (net.ParseIP(host) == nil || port == 0) {
			err = fmt.Errorf("want an IP address and a non-zero port")
		}
		if err != nil {
			return fmt.Errorf("membership: advertise address %q: %w", c.AdvertiseAddr, err)
		}
	}
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return fmt.Errorf("membership: secret key of %d bytes: want 16, 24 or 32", len(c.SecretKey))
	}
	if len(c.ClusterName) > 255 {
		return fmt.Errorf("membership: cluster name of %d bytes: at most 255", len(c.ClusterName))
	}
	for _, d := range []time.Duration{c.ProbeInterval, c.ProbeTimeout, c.GossipInterval, c.PushPullInterval, c.StreamTimeout, c.DeadRetention, c.BroadcastTimeout} {
		if d < 0 {
			return fmt.Errorf("membership: negative duration %v", d)
		}
	}
	switch {
	case c.ProbeTimeout >= c.ProbeInterval:
		return fmt.Errorf("membership: probe timeout %v must be below the probe interval %v", c.ProbeTimeout, c.ProbeInterval)
	case c.SuspicionMult < 1 || c.SuspicionMult > 100:
		return fmt.Errorf("membership: suspicion multiplier %d: want 1..100", c.SuspicionMult)
	case c.MaxMembers < 1 || c.MaxMembers > MaxMaxMembers:
		return fmt.Errorf("membership: max members %d: want 1..%d", c.MaxMembers, MaxMaxMembers)
	case c.EventBuffer < 1 || c.EventBuffer > MaxEventBuf:
		return fmt.Errorf("membership: event buffer %d: want 1..%d", c.EventBuffer, MaxEventBuf)
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, int(port), nil
}
