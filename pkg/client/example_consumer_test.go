package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// exampleNode starts a node with a topic of three records for the
// consumer examples.
func exampleNode() (*clienttest.Node, *client.Client) {
	node, err := clienttest.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	c, err := client.Dial(ctx, node.Addr(), client.WithCredentials("admin", "admin123"))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.CreateTopic(ctx, "orders", client.WithRanges(4)); err != nil {
		log.Fatal(err)
	}
	_, err = c.Produce(ctx, "orders",
		client.Record{Key: []byte("customer-1"), Value: []byte("created")},
		client.Record{Key: []byte("customer-1"), Value: []byte("paid")},
		client.Record{Key: []byte("customer-1"), Value: []byte("shipped")},
	)
	if err != nil {
		log.Fatal(err)
	}
	return node, c
}

// A member of group "billing": run as many copies as you like, with the
// same Group; the node shares the topic between them, each key read by
// one member at a time, in order. Each page is committed once the loop
// has gone through it; Close commits the last and leaves the group, so
// the others take over its share at once.
func ExampleConsumer() {
	node, c := exampleNode()
	defer node.Close()
	defer c.Close()

	consumer, err := client.NewConsumer(c, client.ConsumerOptions{
		Topic: "orders",
		Group: "billing",
		OnAssigned: func(a client.Assignment) {
			log.Printf("reading %d slices of the topic, %d members", a.Slices, a.Members)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close(context.Background())

	// A real program runs until it is told to stop (signal.NotifyContext);
	// this one stops after a while.
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Second)
	defer stop()
	n := 0
	for r, err := range consumer.Records(ctx) {
		if err != nil {
			log.Fatal(err) // not retriable: no such topic, no permission
		}
		fmt.Printf("%s: %s\n", r.Key, r.Value)
		if n++; n == 3 {
			stop()
		}
	}
	if err := consumer.Close(context.Background()); err != nil {
		log.Fatal(err)
	}
	lag, err := consumer.Lag(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("left to read:", lag)
	// Output:
	// customer-1: created
	// customer-1: paid
	// customer-1: shipped
	// left to read: 0
}

// Commit after processing, and resume after a crash: a record is
// committed only once the application has processed it, so a consumer
// that dies before that leaves it to the group. The same program started
// again, under the same member name, takes its share back at once and
// reads from the group's committed position.
func ExampleConsumer_Commit() {
	node, c := exampleNode()
	defer node.Close()
	defer c.Close()
	ctx := context.Background()
	opt := client.ConsumerOptions{
		Topic: "orders", Group: "shipping", Member: "shipper-1",
		ManualCommit: true, MaxRecords: 1,
	}

	// The first run processes one record, commits it, then dies before it
	// has processed the second (no Close).
	first, err := client.NewConsumer(c, opt)
	if err != nil {
		log.Fatal(err)
	}
	page, err := first.Poll(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first run processed", string(page.Records[0].Value))
	if err := first.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := first.Poll(ctx); err != nil {
		log.Fatal(err)
	}

	// The second run resumes after the last commit.
	second, err := client.NewConsumer(c, opt)
	if err != nil {
		log.Fatal(err)
	}
	defer second.Close(ctx)
	for {
		page, err := second.Poll(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("second run processed", string(page.Records[0].Value))
		if err := second.Commit(ctx); errors.Is(err, client.ErrStaleMember) {
			continue // timed out meanwhile: the page comes again
		} else if err != nil {
			log.Fatal(err)
		}
		if string(page.Records[0].Value) == "shipped" {
			break
		}
	}
	// Output:
	// first run processed created
	// second run processed paid
	// second run processed shipped
}
