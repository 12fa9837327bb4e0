package broker_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// countingHandler counts the log records whose message is msg, and
// drops every record.
type countingHandler struct {
	msg string
	n   *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// failedAttempt is what a node logs when one attempt to fail a range
// over ran and did not finish.
const failedAttempt = "failing over a range whose primary is lost did not finish"

// C3, B1: the primary of a range's replicated segment and one follower
// stop; the surviving follower forwards the range's produces to the lost
// primary. No quorum of fence answers and no metadata quorum exist, so
// nothing can be acknowledged (W1); every produce through the survivor
// is answered a retriable reason within one forwarded call and one
// failover attempt (forwardBound), never at the client's deadline; the
// failover is not tried again by every produce, but at most once per
// quarter of MetadataTimeout (its shortest back-off). Once a stopped
// follower returns, the range fails over and takes produces again.
func TestClusterProduceWithoutAQuorumAnswersInTime(t *testing.T) {
	var attempts atomic.Int64
	tc := &testCluster{t: t, log: slog.New(countingHandler{msg: failedAttempt, n: &attempts})}
	root := t.TempDir()
	t.Cleanup(tc.closeAll)
	for i := 1; i <= 3; i++ {
		nd := &clusterNode{id: uint64(i), dir: filepath.Join(root, fmt.Sprint(i)), clientAddr: freeAddr(t), peer: freeAddr(t), gossip: freeAddr(t)}
		tc.nodes = append(tc.nodes, nd)
		var join []string
		if i > 1 {
			join = []string{tc.nodes[0].gossip}
		}
		tc.open(nd, join)
	}
	const topic = "no-quorum"
	ctx := t.Context()
	tc.createEverywhere(tc.nodes[0], topic, 1)
	if _, err := tc.nodes[0].b.Produce(ctx, topic, []broker.Record{rec("a", "-1")}); err != nil {
		t.Fatal(err)
	}
	tc.waitVoters(3)
	seg := activeSegment(t, tc.nodes[0].b, topic)
	if len(seg.Replicas) != 3 {
		t.Fatalf("replicas %v, want three", seg.Replicas)
	}
	byName := func(name string) *clusterNode {
		id, err := strconv.Atoi(strings.TrimPrefix(name, "node-"))
		if err != nil || id < 1 || id > len(tc.nodes) {
			t.Fatalf("replica %q", name)
		}
		return tc.nodes[id-1]
	}
	primary, survivor, other := byName(seg.Replicas[0]), byName(seg.Replicas[1]), byName(seg.Replicas[2])
	readAll(t, survivor.b, topic, 1)
	t.Logf("primary node %d and follower node %d stop; produces go through follower node %d", primary.id, other.id, survivor.id)
	tc.stop(primary)
	tc.stop(other)

	cfg := tc.config(survivor, nil)
	mt := cfg.Cluster.MetadataTimeout
	bound := forwardBound(cfg)
	start := time.Now()
	answers, reasons := 0, map[string]int{}
	pace := time.NewTicker(10 * time.Millisecond) // a refusal comes at once: do not spin
	defer pace.Stop()
	for ; time.Since(start) < 3*mt || answers < 10; <-pace.C {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		sent := time.Now()
		_, err := survivor.b.Produce(pctx, topic, []broker.Record{rec("a", fmt.Sprintf("lonely-%d", answers))})
		took := time.Since(sent)
		cancel()
		answers++
		switch {
		case err == nil:
			t.Fatalf("a produce through node %d was acknowledged with two of three replicas stopped (W1)", survivor.id)
		case !retriable(err):
			t.Fatalf("a produce through node %d without a quorum: %v, not a retriable reason", survivor.id, err)
		case took > bound:
			t.Errorf("a produce through node %d without a quorum was answered after %s, past the %s its configured timeouts allow (C3): %v",
				survivor.id, took.Round(time.Millisecond), bound, err)
		}
		reasons[reasonText(err)]++
	}
	elapsed := time.Since(start)
	n := attempts.Load()
	t.Logf("%d produces in %s answered %v; %d failover attempts failed", answers, elapsed.Round(time.Millisecond), reasons, n)
	if most := 1 + int64(elapsed/(mt/4)); n > most {
		t.Errorf("%d failover attempts in %s: the range is tried again without backing off (at most %d)", n, elapsed.Round(time.Millisecond), most)
	}

	tc.open(other, []string{survivor.gossip})
	eventually(t, 60*time.Second, "a produce through the survivor once a follower is back", func() error {
		_, err := survivor.b.Produce(ctx, topic, []broker.Record{rec("a", "back")})
		return err
	})
	if now := activeSegment(t, survivor.b, topic); now.ID == seg.ID {
		t.Errorf("the range still writes segment %d, led by the stopped node %d", seg.ID, primary.id)
	}
}
