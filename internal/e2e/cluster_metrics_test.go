package e2e

// /metrics of a three-node cluster of real `malachi serve` processes: the
// cluster series (membership, raft, replication) are there and agree
// across nodes, topic and group series come from one node each, and
// traffic is counted where clients sent it.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// scrape reads node id's /metrics as the development admin and returns
// every sample as `name{labels}` -> value, labels as the node printed
// them.
func (c *testCluster) scrape(ctx context.Context, id int) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.node(id).http+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth("admin", "admin123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("node %d /metrics: %s: %s", id, resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("node %d: sample %q: %v", id, line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// sumOf adds the samples whose key starts with prefix.
func sumOf(m map[string]float64, prefix string) (sum float64, n int) {
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			sum += v
			n++
		}
	}
	return sum, n
}

func TestClusterMetrics(t *testing.T) {
	// The nodes inherit the environment: lag is computed every half
	// second rather than every 15.
	t.Setenv("MALACHI_METRICS_LAG_INTERVAL_MS", "500")
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ids := []int{1, 2, 3}

	// Without credentials a node refuses the scrape.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.node(1).http+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a scrape without credentials: %s, want 401", resp.Status)
	}

	// Membership and raft, as every node sees them.
	within(t, replicated, "every node scrapes a formed cluster", func() error {
		leaders := 0.0
		var groups int
		for _, id := range ids {
			m, err := c.scrape(ctx, id)
			if err != nil {
				return err
			}
			if v := m[`malachi_cluster_members{state="alive"}`]; v != 3 {
				return fmt.Errorf("node %d sees %v members alive", id, v)
			}
			if _, ok := m["malachi_raft_proposals_total"]; !ok {
				return fmt.Errorf("node %d has no raft series", id)
			}
			leaders += m["malachi_raft_groups_led"]
			hosted, n := sumOf(m, "malachi_raft_groups{")
			if n == 0 {
				return fmt.Errorf("node %d reports no raft groups", id)
			}
			if id == 1 {
				groups = int(hosted)
			} else if int(hosted) != groups {
				return fmt.Errorf("node %d hosts %v groups, node 1 %d", id, hosted, groups)
			}
		}
		if groups == 0 || leaders != float64(groups) {
			return fmt.Errorf("%v leaders for %d groups across the nodes", leaders, groups)
		}
		return nil
	})

	// Records through node 1, to a topic replicated on all three.
	a := c.admin(ctx, 1)
	if err := a.CreateTopic(ctx, "metered", client.WithReplicas(3)); err != nil {
		t.Fatal(err)
	}
	const sent = 30
	for i := range sent / 10 {
		recs := make([]client.Record, 10)
		for j := range recs {
			recs[j] = client.Record{Key: fmt.Appendf(nil, "k%d", j), Value: fmt.Appendf(nil, "v%d-%d", i, j)}
		}
		if _, err := a.Produce(ctx, "metered", recs...); err != nil {
			t.Fatal(err)
		}
	}
	page, err := a.Fetch(ctx, "metered", client.FetchOptions{Group: "g", Max: 10})
	if err != nil || len(page.Records) == 0 {
		t.Fatalf("fetch: %d records, %v", len(page.Records), err)
	}
	if err := a.Commit(ctx, "metered", client.CommitOptions{Group: "g", Cursor: page.Cursor}); err != nil {
		t.Fatal(err)
	}
	read := len(page.Records)

	within(t, replicated, "the cluster's series agree", func() error {
		var produced, primaries, copies, topicSeries, lagSeries, lag float64
		for _, id := range ids {
			m, err := c.scrape(ctx, id)
			if err != nil {
				return err
			}
			produced += m["malachi_records_produced_total"]
			primaries += m["malachi_replication_primaries"]
			copies += m["malachi_replication_copies"]
			if v := m["malachi_under_replicated_segments"]; v != 0 {
				return fmt.Errorf("node %d sees %v under-replicated segments", id, v)
			}
			if _, ok := m[`malachi_topic_records{topic="metered"}`]; ok {
				topicSeries++
			}
			if v, ok := m[`malachi_consumer_group_lag_records{group="g",topic="metered"}`]; ok {
				lagSeries++
				lag = v
			}
		}
		switch {
		case produced != sent:
			return fmt.Errorf("%v records produced across the nodes, want %d", produced, sent)
		case primaries < 1 || copies < 2:
			return fmt.Errorf("%v primaries and %v copies across the nodes, want at least 1 and 2", primaries, copies)
		case topicSeries != 1 || lagSeries != 1:
			return fmt.Errorf("topic reported by %v nodes and its group by %v, want 1 each", topicSeries, lagSeries)
		case lag != float64(sent-read):
			return fmt.Errorf("group lag %v, want %d", lag, sent-read)
		}
		return nil
	})
}
