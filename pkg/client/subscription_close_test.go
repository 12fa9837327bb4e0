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
	produceKeyed(t, c, "acks", ackRecords)
	for round := range 20 {
		group := fmt.Sprintf("g%d", round)
		sub := subscribeAckAll(t, c, "acks", group, round)
		if err := sub.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
		wantNoLag(t, c, "acks", group, round, "Close")
	}
}

// TestClientCloseKeepsSubscriptionCommit: closing the Client, rather than
// the Subscription, after an Ack must confirm the acknowledged position
// too: the Client closes its subscriptions, commits included, before its
// connection. Twenty rounds, each with a client and a group of its own.
func TestClientCloseKeepsSubscriptionCommit(t *testing.T) {
	n, admin := start(t)
	produceKeyed(t, admin, "acks", ackRecords)
	for round := range 20 {
		group := fmt.Sprintf("g%d", round)
		c := n.Client(t, "admin", "admin123", client.WithRequestTimeout(10*time.Second))
		subscribeAckAll(t, c, "acks", group, round)
		c.Close()
		wantNoLag(t, admin, "acks", group, round, "Client.Close")
	}
}

// ackRecords is how many records the rounds above read and acknowledge.
const ackRecords = 10

// produceKeyed creates topic and produces n records to it, keyed k<i>.
func produceKeyed(t *testing.T, c *client.Client, topic string, n int) {
	t.Helper()
	createTopic(t, c, topic)
	recs := make([]client.Record, n)
	for i := range recs {
		recs[i] = client.Record{Key: fmt.Appendf(nil, "k%d", i), Value: value(i)}
	}
	produce(t, c, topic, recs...)
}

// subscribeAckAll subscribes to topic as group, reads its ackRecords
// records and acknowledges them all in one Ack.
func subscribeAckAll(t *testing.T, c *client.Client, topic, group string, round int) *client.Subscription {
	t.Helper()
	sub, err := c.Subscribe(t.Context(), topic, client.SubscribeOptions{Group: group, Window: 100, PageMax: 100})
	if err != nil {
		t.Fatal(err)
	}
	got, cursor := 0, ""
	for got < ackRecords {
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
	return sub
}

// wantNoLag fails unless group has committed every record of topic by
// the time closing returned.
func wantNoLag(t *testing.T, c *client.Client, topic, group string, round int, closing string) {
	t.Helper()
	g, err := c.DescribeGroup(t.Context(), topic, group)
	if err != nil {
		t.Errorf("round %d: describe: %v (the acknowledged position was never committed)", round, err)
		return
	}
	if g.Lag != 0 {
		t.Errorf("round %d: lag %d after Ack of every record and %s", round, g.Lag, closing)
	}
}
