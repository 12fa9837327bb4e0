// Package client is the Go client of Malachi, a log broker.
//
// Clients see topics, keys and opaque cursors, never partitions or
// offsets. A producer appends records to a topic; records with the same
// key are kept in order. A consumer reads pages of records and gets a
// cursor with each page that says where to continue; a consumer group
// stores its cursor on the broker (Commit) and resumes from it.
//
//	ctx := context.Background()
//	c, err := client.Dial(ctx, "localhost:4040", client.WithCredentials("app", "app123"))
//	if err != nil { ... }
//	defer c.Close()
//
//	_, err = c.Produce(ctx, "orders", client.Record{Key: []byte("customer-42"), Value: body})
//
//	page, err := c.Fetch(ctx, "orders", client.FetchOptions{Group: "billing", Wait: 10 * time.Second})
//	for _, r := range page.Records { ... }
//	err = c.Commit(ctx, "orders", client.CommitOptions{Group: "billing", Cursor: page.Cursor})
//
// # Connections
//
// A Client holds one TCP connection for its calls and multiplexes them
// on it by correlation id: calls from many goroutines are pipelined, a
// reader goroutine hands each answer to its caller, and writes of a burst
// of calls share one flush. Long polls (a Fetch with Wait) go on a second
// connection of their own, because the node holds a poll's slot on its
// connection until it answers: they never hold up other calls. The wire
// cannot cancel a request, so a poll connection whose caller gave up on a
// poll is retired and closes once its other polls are answered, which
// frees the node's slots. If a connection breaks, calls waiting on it fail
// with ErrDisconnected and the next call dials and authenticates again,
// trying the seed addresses (WithSeeds) in turn. A request over the frame
// limit, the client's or the node's, fails alone before it is sent
// (ErrRequestTooLarge); an answer over the client's limit fails its call
// alone (ErrAnswerTooLarge). A Subscription takes a connection of its own,
// because stream mode takes a connection over. WithLogger and WithMetrics
// report connections and requests. docs/client.md has the whole model.
//
// WithTLS (or WithTLSConfig) runs every connection over TLS. Besides a user and password
// (WithCredentials), a connection can log in with its TLS client
// certificate (WithMTLSAuth) or with a JWT (WithToken, or WithTokenSource
// for a token fetched anew at each connection).
//
// # Reconnecting
//
// Every login answers a session token, which the Client keeps (the newest
// one, replaced by each answer; it is never logged). Once the node's
// api_versions answer has listed session_auth (wire key 84), a redial logs
// in with it: the token, plus the user and password under
// WithCredentials, so the node tries the token and falls back to the
// password in the same round trip; the token alone for WithMTLSAuth and
// WithToken. A resumed login costs the node no password hash, so a fleet
// reconnecting after a node restart is served at once. A token the node
// refuses (invalid_session, session_expired, session_revoked,
// tls_required: its user was deleted, its password changed, it expired)
// is dropped, and a token-only client dials again at once with its own
// login. Subscriptions resume the same way.
//
// A node under a reconnect storm turns logins away: rate_limit_exceeded,
// on session_auth with a retry-after hint, or connection_limit_exceeded
// and global_limit_exceeded. A redial then waits the hint plus up to half
// as much again, at random, or without a hint backs off exponentially
// with full jitter (100 ms doubled per refusal, at most 30 s), and dials
// again for as long as the call's context allows. Dial itself returns such
// a refusal at once (RetryAfter reports the hint) unless WithDialRetry
// asks it to wait the same way.
//
// Every blocking method takes a context first; cancelling it abandons the
// wait (the broker may still carry out the request). Each request also
// has a timeout, WithRequestTimeout, plus the wait of a long poll.
//
// # Errors
//
// The broker's refusals are *Error values carrying the wire reason,
// whether it is retriable, and the operation and topic of the call, with
// one sentinel per reason, so callers write errors.Is(err,
// client.ErrNoSuchTopic). Each call returns an *Error of its own, never a
// sentinel, so what errors.As hands out may be kept or changed. Request
// methods retry retriable reasons (migrating, not_owner, no_quorum,
// metadata_unavailable, shutting_down, retry, ...) with capped
// exponential back-off (WithRetry). A request whose connection broke
// after it was sent is retried only when repeating it is harmless or
// allowed: reads, commits, and produces, which are at-least-once.
// IsRetriable tells whether an error that reached the caller is worth
// retrying later.
//
// # Producing
//
// Client.Produce sends one request and waits for it. A Producer batches
// records per topic (linger, size limits), pipelines the batches on the
// Client's connection and reports each record through a promise, or, for
// callers that only count or time acknowledgements, each request through
// ProducerOptions.OnBatch, which costs nothing per record. One goroutine
// writes a topic's batches in order and the broker keeps the produces of
// a connection in order, so per-key order holds; promises run in Produce
// order per topic. Batches refused with a retriable reason, or whose
// answers were lost, are sent again in order, never after a newer batch
// of their topic was stored. Buffering is bounded in records and bytes
// (MaxBufferedRecords, MaxBufferedBytes): Produce blocks for room.
// Produce copies the record's bytes, so the caller may reuse its buffers
// at once. A promise must not wait for the producer: Flush and Close
// called from one return ErrInPromise.
//
// # Wire versions
//
// The client speaks wire v2 where the node does, and wire v1 otherwise
// (WithWireVersion(1) keeps it on v1 whatever the node speaks, byte for
// byte as before v2). Every connection starts with api_versions,
// pipelined ahead of the authentication frame; a node that refuses it (an
// older one) gets wire v1, silently. Client.WireVersion reports the
// outcome.
//
// Wire v2 carries records as stored batches (docs/storage-format.md)
// instead of one by one. Producing, the client keeps a copy of each
// topic's routes (its active ranges, asked for with topic_routes on the
// topic's first produce) and builds one batch per range, optionally
// compressed (ProducerOptions.Compression); the node checks each batch
// and stores it as received. Routes are never shown to users: when a range
// splits or merges, the node re-routes the stale batches record by record
// (nothing is lost or reordered) and says so, and the client fetches the
// routes again. Reading, Fetch gets stored batches back (fetch_batches),
// bounded by FetchOptions.MaxBytes and, when positive, exactly by Max
// records, checks their CRCs and decodes them; each record says which
// range it was read from (Record.Range). A Fetch of a missing topic fails
// with ErrNoSuchTopic with either version (a v1 node answers it with an
// empty page without a cursor, which the client reports so).
//
// Both versions store the same records: what a v1 client produced, a v2
// client reads, and the other way round. Subscriptions (Subscribe) use
// wire v1's push stream (subscribe, key 5) in either case.
//
// # Consuming
//
// Fetch reads a page from a cursor, a group's committed position, or the
// start, and can long-poll. FetchBatches reads the same page without
// decoding it: BatchPage.Each walks its records without building a
// Record for each, and BatchPage.Release hands its memory back for later
// fetches. A Fetcher reads page after page, sending each fetch as soon as
// the cursor at the head of the previous answer has arrived, so that the
// node reads the next page while the current one is still arriving. Subscribe opens a push stream governed by a
// credit window: the broker never has more than window records
// unacknowledged, and Ack returns credit and commits the group's position
// in one step. Delivery is at-least-once: after a restart or a rebalance,
// records after the last commit are delivered again.
//
// Package clienttest runs a real broker in process for tests and
// examples.
package client
