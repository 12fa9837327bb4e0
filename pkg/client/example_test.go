package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// The examples run against a real broker started in process by
// clienttest; against a deployment, dial its address instead.

// connect starts a broker in process and dials it as its first user, as
// Example does step by step.
func connect(ctx context.Context) (*clienttest.Node, *client.Client) {
	node, err := clienttest.New()
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Dial(ctx, node.Addr(), client.WithCredentials("admin", "admin123"))
	if err != nil {
		node.Close()
		log.Fatal(err)
	}
	return node, c
}

func Example() {
	node, err := clienttest.New()
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx := context.Background()

	c, err := client.Dial(ctx, node.Addr(), client.WithCredentials("admin", "admin123"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if err := c.CreateTopic(ctx, "orders"); err != nil {
		log.Fatal(err)
	}
	_, err = c.Produce(ctx, "orders",
		client.Record{Key: []byte("customer-1"), Value: []byte("created")},
		client.Record{Key: []byte("customer-1"), Value: []byte("paid")},
	)
	if err != nil {
		log.Fatal(err)
	}

	// Read as group "billing" (from its committed position, here the
	// start), then commit so the group resumes after these records.
	page, err := c.Fetch(ctx, "orders", client.FetchOptions{Group: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range page.Records {
		fmt.Printf("%s: %s\n", r.Key, r.Value)
	}
	if err := c.Commit(ctx, "orders", client.CommitOptions{Group: "billing", Cursor: page.Cursor}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// customer-1: created
	// customer-1: paid
}

func ExampleProducer() {
	ctx := context.Background()
	node, c := connect(ctx)
	defer node.Close()
	defer c.Close()
	if err := c.CreateTopic(ctx, "clicks", client.WithRanges(4)); err != nil {
		log.Fatal(err)
	}

	p := client.NewProducer(c, client.ProducerOptions{Linger: 10 * time.Millisecond})
	failed := 0
	for i := range 1000 {
		rec := client.Record{Key: fmt.Appendf(nil, "user-%d", i%10), Value: fmt.Appendf(nil, "click %d", i)}
		p.Produce(ctx, "clicks", rec, func(r client.Record, err error) {
			// Promises run on the producer's goroutine: keep them short.
			if err != nil {
				failed++
			}
		})
	}
	// Close flushes: every promise has run when it returns.
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("failed:", failed)
	// Output:
	// failed: 0
}

func ExampleClient_Subscribe() {
	ctx := context.Background()
	node, c := connect(ctx)
	defer node.Close()
	defer c.Close()
	if err := c.CreateTopic(ctx, "events"); err != nil {
		log.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.Produce(ctx, "events", client.Record{Value: fmt.Appendf(nil, "event %d", i)}); err != nil {
			log.Fatal(err)
		}
	}

	sub, err := c.Subscribe(ctx, "events", client.SubscribeOptions{Group: "audit", Window: 100, PageMax: 10})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for seen := 0; seen < 3; {
		page, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range page.Records {
			fmt.Println(string(r.Value))
		}
		seen += len(page.Records)
		// Return the credit and commit the group's position.
		if err := sub.Ack(ctx, page.Cursor, len(page.Records)); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// event 0
	// event 1
	// event 2
}

func ExampleError() {
	ctx := context.Background()
	node, c := connect(ctx)
	defer node.Close()
	defer c.Close()

	_, err := c.Produce(ctx, "no-such-topic", client.Record{Value: []byte("x")})
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Reason, e.Retriable)
	}
	fmt.Println(errors.Is(err, client.ErrNoSuchTopic))

	_, err = client.Dial(ctx, node.Addr(), client.WithCredentials("admin", "wrong"))
	fmt.Println(errors.Is(err, client.ErrInvalidCredentials))
	// Output:
	// no_such_topic false
	// true
	// true
}

// A client that logs in with its TLS client certificate. (Not run: it
// needs a broker with TLS, a client CA and mtls_auth enabled.)
func ExampleWithMTLSAuth() {
	tlsCfg, err := client.NewTLSConfig("certs/ca.pem", "certs/client.pem", "certs/client-key.pem", "")
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Dial(context.Background(), "broker.internal:4040", client.WithTLS(tlsCfg), client.WithMTLSAuth())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// A client that logs in with a JWT, asking for a fresh one whenever it
// connects. (Not run: it needs a broker with token_auth enabled.)
func ExampleWithTokenSource() {
	tlsCfg, err := client.NewTLSConfig("certs/ca.pem", "", "", "")
	if err != nil {
		log.Fatal(err)
	}
	fetchToken := func(ctx context.Context) (string, error) {
		// Ask the identity provider; a file a sidecar renews works too.
		b, err := os.ReadFile("/var/run/secrets/malachi/token")
		return string(b), err
	}
	c, err := client.Dial(context.Background(), "broker.internal:4040", client.WithTLS(tlsCfg), client.WithTokenSource(fetchToken))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// Following a topic: read from a position (here the start; EndCursor for
// only what comes next) and long-poll for more. Each page's cursor is
// where the next fetch goes on; an empty page after the wait is normal.
func Example_followTopic() {
	ctx := context.Background()
	node, c := connect(ctx)
	defer node.Close()
	defer c.Close()
	if err := c.CreateTopic(ctx, "logs"); err != nil {
		log.Fatal(err)
	}
	go func() {
		for i := range 3 {
			c.Produce(ctx, "logs", client.Record{Value: fmt.Appendf(nil, "line %d", i)})
		}
	}()

	cursor := "" // the start of the topic
	for seen := 0; seen < 3; {
		// Long polls go on a connection of their own: they never hold up
		// the client's other calls.
		page, err := c.Fetch(ctx, "logs", client.FetchOptions{Cursor: cursor, Wait: 10 * time.Second})
		if errors.Is(err, client.ErrNoSuchTopic) {
			log.Fatal("the topic was deleted")
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range page.Records {
			fmt.Println(string(r.Value))
		}
		seen += len(page.Records)
		cursor = page.Cursor
	}
	// Output:
	// line 0
	// line 1
	// line 2
}

// A group's lag: the records after its committed position, in total and
// per range.
func ExampleClient_DescribeGroup() {
	ctx := context.Background()
	node, c := connect(ctx)
	defer node.Close()
	defer c.Close()
	if err := c.CreateTopic(ctx, "orders"); err != nil {
		log.Fatal(err)
	}
	for i := range 5 {
		if _, err := c.Produce(ctx, "orders", client.Record{Value: fmt.Appendf(nil, "order %d", i)}); err != nil {
			log.Fatal(err)
		}
	}
	page, err := c.Fetch(ctx, "orders", client.FetchOptions{Group: "billing", Max: 2})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Commit(ctx, "orders", client.CommitOptions{Group: "billing", Cursor: page.Cursor}); err != nil {
		log.Fatal(err)
	}

	g, err := c.DescribeGroup(ctx, "orders", "billing")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("lag:", g.Lag)
	// Output:
	// lag: 3
}

// Resuming after a crash: a group commits a page only once it is
// processed, so a process that dies between the two reads the page again
// when it comes back (at-least-once): make processing idempotent, or keep
// the cursor with the results, in one transaction, and fetch from it.
func Example_resumeAfterCrash() {
	ctx := context.Background()
	node, c := connect(ctx)
	defer node.Close()
	if err := c.CreateTopic(ctx, "payments"); err != nil {
		log.Fatal(err)
	}
	for i := range 4 {
		if _, err := c.Produce(ctx, "payments", client.Record{Value: fmt.Appendf(nil, "payment %d", i)}); err != nil {
			log.Fatal(err)
		}
	}
	process := func(c *client.Client, commit bool) {
		page, err := c.Fetch(ctx, "payments", client.FetchOptions{Group: "ledger", Max: 2})
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range page.Records {
			fmt.Println("processed", string(r.Value))
		}
		if commit {
			if err := c.Commit(ctx, "payments", client.CommitOptions{Group: "ledger", Cursor: page.Cursor}); err != nil {
				log.Fatal(err)
			}
		}
	}
	process(c, true)
	process(c, false) // the process dies before it commits
	c.Close()

	fmt.Println("restarted")
	c, err := client.Dial(ctx, node.Addr(), client.WithCredentials("admin", "admin123"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	process(c, true) // the group's committed position: after payment 1
	// Output:
	// processed payment 0
	// processed payment 1
	// processed payment 2
	// processed payment 3
	// restarted
	// processed payment 2
	// processed payment 3
}
