package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// topJSON is what the test reads of one `malachi top --json` snapshot.
type topJSON struct {
	Nodes []struct {
		Name            string   `json:"name"`
		Liveness        string   `json:"liveness"`
		GroupsLed       *float64 `json:"raft_groups_led"`
		UnderReplicated *float64 `json:"under_replicated_segments"`
		Up              bool     `json:"up"`
		Error           string   `json:"error"`
		ProduceRecords  *float64 `json:"produce_records_per_second"`
		ProduceP99      *float64 `json:"produce_p99_seconds"`
		Connections     *float64 `json:"connections"`
	} `json:"nodes"`
	Topics []struct {
		Name      string   `json:"name"`
		RecordsIn *float64 `json:"records_in_per_second"`
		Records   *float64 `json:"records"`
		Ranges    *float64 `json:"ranges"`
	} `json:"topics"`
	Groups []struct {
		Topic      string   `json:"topic"`
		Group      string   `json:"group"`
		LagRecords *float64 `json:"lag_records"`
	} `json:"groups"`
}

func positive(v *float64) bool { return v != nil && *v > 0 }

// TestTopFollowsARealNode: `malachi top --json` against a node's /metrics
// shows, while records are produced, a non-zero produce rate and latency
// for the node, the topic with a non-zero rate, and a group's lag; Ctrl-C
// ends it with exit 0.
func TestTopFollowsARealNode(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	c.env = append(c.env, "MALACHI_METRICS_LAG_INTERVAL_MS=200")
	node := startServeChild(t, c, t.TempDir(), "127.0.0.1:0")
	c.env = append(c.env, "MALACHI_SERVER="+node.addr)
	c.ok("topic", "create", "orders", "--ranges", "2")
	c.okIn(strings.Repeat("r\n", 50), "produce", "orders")
	c.ok("consume", "orders", "--group", "billing", "--commit", "--max", "10")

	f := c.start("top", "--json", "--http-addr", node.http, "--interval", "200ms")
	deadline := time.NewTimer(2 * waitFor)
	defer deadline.Stop()
	var last string
	for done := false; !done; {
		select {
		case l, ok := <-f.lines:
			if !ok {
				t.Fatalf("top ended; last snapshot %s; stderr: %s", last, f.stderr.String())
			}
			last = l
			var v topJSON
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("snapshot is no JSON: %v: %q", err, l)
			}
			if len(v.Nodes) != 1 || !v.Nodes[0].Up {
				t.Fatalf("node not scraped: %s", l)
			}
			done = positive(v.Nodes[0].ProduceRecords) && positive(v.Nodes[0].ProduceP99) &&
				topicRate(v, "orders") && groupLag(v, "orders", "billing")
			if !done {
				c.okIn(strings.Repeat("r\n", 20), "produce", "orders")
			}
		case <-deadline.C:
			t.Fatalf("no snapshot with rates, the topic's rate and the group's lag within %s; last: %s", 2*waitFor, last)
		}
	}
	if code, _ := f.interrupt(); code != 0 {
		t.Fatalf("top exit %d after Ctrl-C: %s", code, f.stderr.String())
	}
}

func topicRate(v topJSON, name string) bool {
	for _, tp := range v.Topics {
		if tp.Name == name {
			return positive(tp.RecordsIn) && positive(tp.Records) && tp.Ranges != nil && *tp.Ranges == 2
		}
	}
	return false
}

func groupLag(v topJSON, topic, group string) bool {
	for _, g := range v.Groups {
		if g.Topic == topic && g.Group == group {
			return positive(g.LagRecords)
		}
	}
	return false
}

// TestTopOnceText: `malachi top --once` takes two scrapes and prints one
// snapshot in text: a producer writing meanwhile shows as a non-zero
// produce rate on the node's line, and the topic is named.
func TestTopOnceText(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	node := startServeChild(t, c, t.TempDir(), "127.0.0.1:0")
	c.env = append(c.env, "MALACHI_SERVER="+node.addr)
	c.ok("topic", "create", "clicks")
	startFeeder(t, c, "clicks")

	deadline := time.Now().Add(waitFor)
	for {
		out := c.ok("top", "--once", "--samples", "2", "--interval", "300ms", "--http-addr", node.http)
		if strings.Count(out, "malachi top ") != 1 {
			t.Fatalf("--once printed %d snapshots:\n%s", strings.Count(out, "malachi top "), out)
		}
		rate, ok := nodeProduceRate(out, node.http)
		if !ok {
			t.Fatalf("no line for node %s:\n%s", node.http, out)
		}
		if rate != "0.0" && rate != "-" && strings.Contains(out, " clicks ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no produce rate while a producer writes, within %s:\n%s", waitFor, out)
		}
	}
}

// nodeProduceRate is the PRODUCE/S cell of the node's line.
func nodeProduceRate(out, name string) (string, bool) {
	for _, l := range strings.Split(out, "\n") {
		fields := strings.Fields(l)
		if len(fields) > 3 && fields[0] == name {
			return fields[3], true
		}
	}
	return "", false
}

// startFeeder runs `malachi produce topic` with a stdin the test keeps
// writing lines to until it ends.
func startFeeder(t *testing.T, c *cli, topic string) {
	t.Helper()
	cmd := exec.Command(c.bin, "produce", topic)
	cmd.Env = c.env
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// A write blocks while the pipe is full; closing it ends one.
			if _, err := fmt.Fprintf(in, "record-%d\n", i); err != nil {
				return
			}
		}
	})
	t.Cleanup(func() {
		close(stop)
		in.Close()
		wg.Wait()
		cmd.Process.Kill()
		cmd.Wait()
	})
}

// TestTopRefusesBadFlags: mistakes in top's flags are usage errors.
func TestTopRefusesBadFlags(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "127.0.0.1:1")
	for _, args := range [][]string{
		{"top", "--interval", "0s"},
		{"top", "--samples", "-1"},
		{"top", "--limit", "0"},
		{"top", "extra"},
	} {
		if stderr := c.fails(2, args...); !strings.Contains(stderr, "error:") {
			t.Errorf("malachi %s: %q", strings.Join(args, " "), stderr)
		}
	}
	// A node that cannot be reached is shown down, not a failure.
	out := c.ok("top", "--once", "--samples", "1", "--http-addr", "127.0.0.1:1")
	if !strings.Contains(out, "down") || !strings.Contains(out, "127.0.0.1:1") {
		t.Errorf("an unreachable node:\n%s", out)
	}
}

// TestTopDiscoversTheCluster: against one node of a three-node cluster,
// top scrapes every node at the HTTP address the cluster reports, shows
// the raft and repair series a cluster node has, and shows a node that
// was killed as down.
func TestTopDiscoversTheCluster(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	d := startDev(t, c, 3)
	n1 := d.at(c, 1)
	snapshot := func() (topJSON, string, error) {
		var v topJSON
		r := n1.run(strings.NewReader(""), "top", "--once", "--samples", "1", "-o", "json")
		if r.code != 0 {
			return v, "", fmt.Errorf("exit %d: %s", r.code, r.stderr)
		}
		return v, r.stdout, json.Unmarshal([]byte(r.stdout), &v)
	}
	eventually(t, "three nodes up, each with its raft series", func() error {
		v, out, err := snapshot()
		if err != nil {
			return err
		}
		if len(v.Nodes) != 3 {
			return fmt.Errorf("%d nodes: %s", len(v.Nodes), out)
		}
		for _, n := range v.Nodes {
			if !n.Up || n.GroupsLed == nil || n.UnderReplicated == nil || n.Liveness != "alive" {
				return fmt.Errorf("a node not up, alive and with raft series: %s", out)
			}
		}
		return nil
	})
	if err := syscall.Kill(d.pids[2], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node 3 shown down", func() error {
		v, out, err := snapshot()
		if err != nil {
			return err
		}
		for _, n := range v.Nodes {
			if n.Name == "3" && !n.Up && n.Error != "" {
				return nil
			}
		}
		return fmt.Errorf("node 3 not down: %s", out)
	})
}
