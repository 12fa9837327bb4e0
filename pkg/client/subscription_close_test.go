package client_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// TestSubscriptionAckThenCloseKeepsCommit: stream_ack has no answer, so
// an Ack followed at once by Close used to lose the commit whenever the
// node had not applied the ack before the connection went. Close now
// confirms the last acknowledged position. Twenty rounds, each with a
// group of its own.
func TestSubscriptionAckThenCloseKeepsCommit(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "acks")
	const n = 10
	recs := make([]client.Record, n)
	for i := range recs {
		recs[i] = client.Record{Key: fmt.Appendf(nil, "k%d", i), Value: value(i)}
	}
	produce(t, c, "acks", recs...)
	for round := range 20 {
		group := fmt.Sprintf("g%d", round)
		sub, err := c.Subscribe(t.Context(), "acks", client.SubscribeOptions{Group: group, Window: 100, PageMax: 100})
		if err != nil {
			t.Fatal(err)
		}
		got, cursor := 0, ""
		for got < n {
			page, err := sub.Next(t.Context())
			if err != nil {
				t.Fatalf("round %d: next after %d records: %v", round, got, err)
			}
			got += len(page.Records)
			cursor = page.Cursor
		}
		if err := sub.Ack(t.Context(), cursor, got); err != nil {
			t.Fatal(err)
		}
		if err := sub.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
		g, err := c.DescribeGroup(t.Context(), "acks", group)
		if err != nil {
			t.Errorf("round %d: describe: %v (the acknowledged position was never committed)", round, err)
			continue
		}
		if g.Lag != 0 {
			t.Errorf("round %d: lag %d after Ack of every record and Close", round, g.Lag)
		}
	}
}

// TestClientCloseKeepsSubscriptionCommit: closing the Client, rather than
// the Subscription, after an Ack must confirm the acknowledged position
// too: the Client closes its subscriptions, commits included, before its
// connection. Twenty rounds, each with a client and a group of its own.
func TestClientCloseKeepsSubscriptionCommit(t *testing.T) {
	n, admin := start(t)
	createTopic(t, admin, "acks")
	const records = 10
	recs := make([]client.Record, records)
	for i := range recs {
		recs[i] = client.Record{Key: fmt.Appendf(nil, "k%d", i), Value: value(i)}
	}
	produce(t, admin, "acks", recs...)
	for round := range 20 {
		group := fmt.Sprintf("g%d", round)
		c := n.Client(t, "admin", "admin123", client.WithRequestTimeout(10*time.Second))
		sub, err := c.Subscribe(t.Context(), "acks", client.SubscribeOptions{Group: group, Window: 100, PageMax: 100})
		if err != nil {
			t.Fatal(err)
		}
		got, cursor := 0, ""
		for got < records {
			page, err := sub.Next(t.Context())
			if err != nil {
				t.Fatalf("round %d: next after %d records: %v", round, got, err)
			}
			got += len(page.Records)
			cursor = page.Cursor
		}
		if err := sub.Ack(t.Context(), cursor, got); err != nil {
			t.Fatal(err)
		}
		c.Close()
		g, err := admin.DescribeGroup(t.Context(), "acks", group)
		if err != nil {
			t.Errorf("round %d: describe: %v (the acknowledged position was never committed)", round, err)
			continue
		}
		if g.Lag != 0 {
			t.Errorf("round %d: lag %d after Ack of every record and Client.Close", round, g.Lag)
		}
	}
}
