package e2e

// Self-healing with real processes: four `malachi serve` nodes on
// loopback, segments of three replicas, a short --dead-after. A node
// killed for good has every sealed segment it held copied back to three
// replicas on the others, while the history reads back whole through
// every surviving node.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// sealedOf lists topic's sealed segments as cl's node describes them.
func sealedOf(ctx context.Context, cl *client.Client, topic string) ([]client.SegmentInfo, error) {
	d, err := cl.DescribeTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	var out []client.SegmentInfo
	for _, r := range d.Ranges {
		for _, s := range r.Segments {
			if !s.Active {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// readValues reads topic from its start through cl.
func readValues(ctx context.Context, cl *client.Client, topic string) ([]string, error) {
	var out []string
	cursor := ""
	for {
		page, err := cl.Fetch(ctx, topic, client.FetchOptions{Cursor: cursor, Max: 1000})
		if err != nil {
			return nil, err
		}
		if len(page.Records) == 0 {
			return out, nil
		}
		for _, r := range page.Records {
			out = append(out, string(r.Value))
		}
		cursor = page.Cursor
	}
}

func TestClusterHealsAKilledNodesSegments(t *testing.T) {
	c := startCluster(t, 4, "--replication-factor", "4", "--segment-max-bytes", "4096",
		"--dead-after", "2s", "--heal-interval", "200ms")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a1 := c.admin(ctx, 1)
	if err := a1.CreateTopic(ctx, "healed", client.WithReplicas(3)); err != nil {
		t.Fatal(err)
	}
	pad := string(bytes.Repeat([]byte("x"), 300))
	var want []string
	for i := range 80 {
		v := strconv.Itoa(i) + pad
		within(t, replicated, fmt.Sprintf("produce %d", i), func() error {
			_, err := a1.Produce(ctx, "healed", client.Record{Key: []byte("k"), Value: []byte(v)})
			return err
		})
		want = append(want, v)
	}
	sealed, err := sealedOf(ctx, a1, "healed")
	if err != nil || len(sealed) < 2 {
		t.Fatalf("%d sealed segments (%v), want several", len(sealed), err)
	}
	victim := ""
	for _, name := range sealed[0].Replicas {
		if name != "node-1" {
			victim = name
			break
		}
	}
	var held []uint64
	for _, s := range sealed {
		if slices.Contains(s.Replicas, victim) {
			held = append(held, s.ID)
		}
	}
	id, _ := strconv.Atoi(victim[len("node-"):])
	c.node(id).kill()

	took := within(t, 2*time.Minute, "every sealed segment of "+victim+" back at three replicas", func() error {
		segs, err := sealedOf(ctx, a1, "healed")
		if err != nil {
			return err
		}
		for _, s := range segs {
			if slices.Contains(held, s.ID) && (len(s.Replicas) != 3 || slices.Contains(s.Replicas, victim)) {
				return fmt.Errorf("segment %d has replicas %v", s.ID, s.Replicas)
			}
		}
		return nil
	})
	t.Logf("%d segments healed %s after the kill", len(held), took)
	for other := 1; other <= 4; other++ {
		if other == id {
			continue
		}
		cl := c.admin(ctx, other)
		within(t, replicated, fmt.Sprintf("read through node %d", other), func() error {
			got, err := readValues(ctx, cl, "healed")
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("read %d records that differ from the %d produced", len(got), len(want))
			}
			return nil
		})
	}
}
