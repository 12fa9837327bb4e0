package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"os"
	"sync"
	"time"
)

// Consumer defaults.
const (
	DefaultConsumerMaxRecords = 500
	DefaultConsumerMaxWait    = 2 * time.Second
	DefaultHeartbeatInterval  = 3 * time.Second
	// maxMemberName is the node's bound on group and member names.
	maxMemberName = 255
)

// ConsumerOptions configure a Consumer; see NewConsumer. Topic and Group
// are required.
type ConsumerOptions struct {
	Topic string
	Group string
	// Member names the consumer in its group. The default is made once
	// per Consumer from the host name, the process id and a random
	// suffix. A program that comes back after a crash under the name it
	// had takes its ranges over at once; under a new name, the others
	// wait for the node to time the old member out (the group session
	// timeout, 30 s by default) before its ranges move.
	Member string
	// Start is where a group that has not started yet starts reading:
	// StartAtBeginning (the default), StartAtEnd, StartAtTime or
	// StartAtCursor. A group with a committed position resumes from it,
	// and a group with a live member reads on from where that member
	// started, whatever Start says (to move a group, use
	// Client.SeekGroup). The first Poll checks the group and then commits
	// the start position, in two requests: members started with
	// different Start positions at the same moment end up at the latest
	// of them, and a member that joins between another's check and its
	// commit may have records it was given (and not yet committed)
	// skipped for the group. Start a group's first members with the same
	// Start, or set the position beforehand with Client.SeekGroup.
	Start StartPosition
	// MaxRecords bounds the records of one page (default 500).
	MaxRecords int
	// MaxWait is how long one fetch waits on the node for records before
	// it asks again (default 2 s, at most 30 s). A range that moves to
	// this member reaches it at its next fetch, so MaxWait also bounds
	// how long a rebalance takes to show.
	MaxWait time.Duration
	// HeartbeatInterval is how often the consumer tells the node it is
	// alive while the application works through a page (default 3 s;
	// negative: never, so a member that takes longer than the group
	// member timeout over a page loses its ranges). Keep it well under
	// the group member timeout.
	HeartbeatInterval time.Duration
	// ManualCommit makes the application say which pages it processed,
	// with Commit or MarkProcessed. Without it, a page Poll returned is
	// taken as processed when Poll is called again or the consumer is
	// closed.
	ManualCommit bool
	// OnAssigned is called when the consumer learns of a new generation
	// of its group (it joined, or the members or the topic's ranges
	// changed), with its share.
	OnAssigned func(Assignment)
	// OnRevoked is called when the consumer has lost its share: it left
	// the group (Close), the node dropped it (it was silent too long, or
	// the node restarted) or refused its commit as stale. The records it
	// was given and had not committed go to the group's reader of their
	// range, perhaps another member, which may already be reading them.
	// Its next Poll joins the group again.
	//
	// Both callbacks run on the goroutine that called Poll, Records,
	// Commit or Close, before the call returns, with no lock of the
	// Consumer held: they may call its methods (Commit from OnRevoked,
	// say, or Close). They run one at a time and in order; a change
	// learned while another goroutine is running them (a Close during a
	// Poll) is told by that goroutine.
	OnRevoked func(Assignment)
}

// Assignment is a consumer's share of its group, as the node last told
// it. Which part of the keyspace it reads is the node's business; the
// share is told as a count of keyspace slices (a topic's ranges).
type Assignment struct {
	// Generation counts the changes of the group's membership and of its
	// topic's ranges; it only grows while the node runs.
	Generation uint64
	// Slices is how many of the topic's keyspace slices the consumer
	// reads now. A slice moving to it from another member counts once
	// that member has fetched again (it may hold records of it still).
	Slices int
	// Members is how many live members the group has.
	Members int
}

// StartPosition is where a group with no committed position starts.
type StartPosition struct {
	kind   startKind
	at     time.Time
	cursor string
}

type startKind uint8

const (
	startBeginning startKind = iota
	startEnd
	startTime
	startCursor
)

// StartAtBeginning starts at the oldest record the topic keeps.
func StartAtBeginning() StartPosition { return StartPosition{} }

// StartAtEnd starts after the records the topic holds when the consumer
// first polls: only records produced from then on are read.
func StartAtEnd() StartPosition { return StartPosition{kind: startEnd} }

// StartAtTime starts at the first record of each range whose timestamp is
// at or after t (see Client.CursorAt).
func StartAtTime(t time.Time) StartPosition { return StartPosition{kind: startTime, at: t} }

// StartAtCursor starts at cursor, from a Page or Client.EndCursor.
func StartAtCursor(cursor string) StartPosition {
	return StartPosition{kind: startCursor, cursor: cursor}
}

// Consumer reads a topic as one member of a consumer group: the node
// shares the topic's keyspace slices between the group's live members,
// each slice read by one member at a time, in order, and every member
// resumes from the group's committed position.
//
// Delivery is at least once. A page is committed once the application has
// processed it (see ManualCommit), before the next page is fetched; a
// slice moves to another member only once its reader has committed and
// fetched again, so no two members work on records of the same key at
// once, while every member stays live. Records given and not committed
// (a crash, a refused commit) are given again, to this member or another.
//
// The consumer keeps its membership alive with heartbeats while the
// application processes a page, and joins again on its own after the
// connection breaks or the node restarts, backing off with jitter, from
// the group's committed position. Close commits what was processed and
// leaves the group, so its slices pass to the others at once.
//
// Poll, Records, Commit and MarkProcessed are for one goroutine; Close,
// Lag and Assignment may be called from any.
type Consumer struct {
	c      *Client
	opt    ConsumerOptions
	member string

	life     context.Context // ends at Close: the consumer's own requests
	stopLife context.CancelFunc
	closing  chan struct{} // closed by Close
	kick     chan struct{} // capacity 1: heartbeat now

	// pollMu is held by Poll, Commit and Close: one of them at a time
	// runs the member protocol (commit, then fetch).
	pollMu  sync.Mutex
	started bool // the start position is settled

	mu     sync.Mutex // guards the following
	closed bool
	// gen is the generation a heartbeat told after the fetch of the last
	// page, 0 until one has: commits carry it. The fetch may have joined
	// the group anew (after a node restart, say) under a later
	// generation than the consumer knew. genSeq counts the fetches, so
	// that the answer of a heartbeat sent before one is not taken for it.
	gen    uint64
	genSeq uint64
	share  Assignment
	joined bool // a fetch joined the group: there is a membership to leave
	// unsure: a fetch got no answer (the connection broke, or it was
	// given up on), so the node may count the consumer a member.
	unsure bool
	firing bool // a goroutine is calling the callbacks (fire)
	// legacy: the node serves neither member_heartbeat nor member_commit
	// (it predates them): commits are plain, heartbeats are not sent.
	legacy bool
	// unmarked is the cursor after the last page Poll returned, until
	// it is marked processed; marked is the cursor to commit, "" for
	// nothing. Both are dropped when the membership that read their
	// pages is lost: those records are no longer the consumer's to commit.
	unmarked string
	marked   string
	// epoch counts the memberships lost, so that a page read before a
	// loss is never marked after it.
	epoch uint64
	// pageEpoch is the epoch when the last page arrived.
	pageEpoch uint64
	inflight  chan fetchResult
	events    pendingEvents
	hbDone    chan struct{} // closed when the heartbeat goroutine exits; nil before it starts

	closeOnce sync.Once
	closeErr  error
}

type fetchResult struct {
	page Page
	err  error
}

// NewConsumer returns a consumer of opt.Topic in opt.Group. It does no
// I/O: the first Poll joins the group.
func NewConsumer(c *Client, opt ConsumerOptions) (*Consumer, error) {
	switch {
	case opt.Topic == "":
		return nil, errors.New("malachi: consumer: no topic")
	case opt.Group == "" || len(opt.Group) > maxMemberName:
		return nil, fmt.Errorf("malachi: consumer: group name must be 1 to %d bytes", maxMemberName)
	case len(opt.Member) > maxMemberName:
		return nil, fmt.Errorf("malachi: consumer: member name must be at most %d bytes", maxMemberName)
	}
	if opt.MaxRecords <= 0 {
		opt.MaxRecords = DefaultConsumerMaxRecords
	}
	if opt.MaxWait <= 0 {
		opt.MaxWait = DefaultConsumerMaxWait
	}
	opt.MaxWait = min(opt.MaxWait, 30*time.Second)
	if opt.HeartbeatInterval == 0 {
		opt.HeartbeatInterval = DefaultHeartbeatInterval
	}
	member := opt.Member
	if member == "" {
		member = defaultMember()
	}
	life, stop := context.WithCancel(context.Background())
	return &Consumer{
		c: c, opt: opt, member: member,
		life: life, stopLife: stop, closing: make(chan struct{}), kick: make(chan struct{}, 1),
	}, nil
}

// defaultMember names a member after its host and process, with a random
// suffix so that two consumers of one process differ.
func defaultMember() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "consumer"
	}
	var b [4]byte
	rand.Read(b[:])
	name := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	if len(name) > maxMemberName {
		name = name[len(name)-maxMemberName:]
	}
	return name
}

// Member returns the consumer's member name.
func (c *Consumer) Member() string { return c.member }

// Assignment returns the consumer's share as the node last told it; zero
// before the first heartbeat or after the share was lost.
func (c *Consumer) Assignment() Assignment {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.share
}

// Poll returns the next page of records for this member, waiting for one
// until ctx ends. Before it fetches, it commits what was processed:
// without ManualCommit, every page Poll returned before; with it, what
// MarkProcessed marked. Records not committed are fetched again: with
// ManualCommit, a page the application did not mark comes back on the
// next Poll, so a failed page is simply not marked.
//
// Lost connections, node restarts and refusals worth retrying are
// retried, with back-off, for as long as ctx allows. Poll fails at once
// with ErrClosed after Close, with ctx's error when it ends, and with a
// refusal that retrying would not change (ErrNoSuchTopic,
// ErrPermissionDenied).
func (c *Consumer) Poll(ctx context.Context) (Page, error) {
	c.pollMu.Lock()
	p, err := c.poll(ctx, true)
	c.pollMu.Unlock()
	c.fire()
	return p, err
}

// Records returns the consumer's records one by one, polling as needed.
// A page counts as processed once the loop has gone through all of its
// records; if the loop stops inside a page, the rest of it, and the
// records already seen of it, are given again by the next Poll or
// Records unless Commit says otherwise. The sequence ends when ctx ends
// or the consumer is closed, without an error; another error is yielded
// once, with a zero Record, and ends it.
func (c *Consumer) Records(ctx context.Context) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for {
			c.pollMu.Lock()
			p, err := c.poll(ctx, false)
			epoch := c.lastPageEpoch()
			c.pollMu.Unlock()
			c.fire()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
					yield(Record{}, err)
				}
				return
			}
			for _, r := range p.Records {
				if !yield(r, nil) {
					return
				}
			}
			c.markCursor(p.Cursor, epoch)
		}
	}
}

// MarkProcessed marks the last page Poll returned as processed: the next
// Poll, Commit or Close commits it. It is what a page is without
// ManualCommit.
func (c *Consumer) MarkProcessed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unmarked != "" {
		c.marked, c.unmarked = c.unmarked, ""
	}
}

// Commit marks the last page Poll returned as processed and commits it,
// with every page processed before, and returns once the node has made
// the commit durable. In a Records loop it commits the pages the loop
// has gone through entirely. It fails with ErrStaleMember when the node
// no longer counts the consumer a member (it was silent too long, or the
// node restarted): the records then go to the group's reader of their
// range, perhaps another member, and OnRevoked has been called.
func (c *Consumer) Commit(ctx context.Context) error {
	c.pollMu.Lock()
	c.MarkProcessed()
	err := c.commitMarked(ctx)
	c.pollMu.Unlock()
	c.fire()
	return err
}

// Lag returns how many records of the topic the group has not committed
// yet, all members together: records given to a member and not yet
// committed count. It asks the node (describe_group), which counts them
// exactly up to about a million records and estimates past that; for a
// group that has neither committed nor had a member yet, it counts the
// records the topic holds (describe_topic).
func (c *Consumer) Lag(ctx context.Context) (uint64, error) {
	g, err := c.c.DescribeGroup(ctx, c.opt.Topic, c.opt.Group)
	if errors.Is(err, ErrNotFound) {
		// No committed position and no members: the group has read
		// nothing, so every record the topic holds is ahead of it. Each
		// record is stored in one range, sealed or active.
		d, derr := c.c.DescribeTopic(ctx, c.opt.Topic)
		if derr != nil {
			return 0, derr
		}
		var n uint64
		for i := range d.Ranges {
			n += d.Ranges[i].Records()
		}
		return n, nil
	}
	return g.Lag, err
}

// Close commits what was processed (see Poll), ends a fetch still under
// way, leaves the group, so that the consumer's slices pass to the other
// members at once, and stops the consumer's goroutine. A Poll waiting
// meanwhile returns ErrClosed. Close returns the first failure of the
// commit or the leave; ctx bounds both. A commit the node refuses
// because the consumer had lost its membership (after a node restart,
// say) is no failure: those records go to the group's reader of their
// range, and OnRevoked is called. Close is idempotent: later calls, and
// calls made meanwhile, wait for the first and return what it returned.
func (c *Consumer) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		close(c.closing)
		c.pollMu.Lock()
		c.closeErr = c.shutdown(ctx)
		c.pollMu.Unlock()
	})
	c.fire()
	return c.closeErr
}

// shutdown is Close's work, under pollMu.
//
// A fetch under way is ended first: a long poll would otherwise hold
// Close for up to MaxWait. The page it may bring is dropped, uncommitted,
// for the next reader. The node joins a member when it takes its fetch,
// so once the fetch has ended the leave undoes that join, and it is sent
// whenever a fetch may have joined: one answered, or one that got no
// answer. A fetch written to the connection just before Close may still
// reach the node after the leave (the two go on different connections)
// and join the member again; its slices then wait for the group session
// timeout.
func (c *Consumer) shutdown(ctx context.Context) error {
	c.stopLife() // ends the fetch under way and the heartbeats
	c.mu.Lock()
	ch := c.inflight
	c.mu.Unlock()
	if ch != nil {
		select {
		case r := <-ch:
			c.settleFetch(r)
		case <-ctx.Done():
			c.mu.Lock()
			c.unsure = true
			c.mu.Unlock()
		}
	}
	if !c.opt.ManualCommit {
		c.MarkProcessed()
	}
	c.mu.Lock()
	hb := c.hbDone
	c.mu.Unlock()
	if hb != nil {
		<-hb
	}
	err := c.commitMarked(ctx)
	if errors.Is(err, ErrStaleMember) {
		// Nothing is lost: the records go to the group's reader of their
		// range, and OnRevoked says so.
		err = nil
	}
	c.mu.Lock()
	joined, unsure := c.joined, c.unsure
	c.mu.Unlock()
	if joined || unsure {
		lerr := c.leave(ctx)
		if errors.Is(lerr, ErrNoSuchTopic) {
			lerr = nil // the topic is gone, and its groups with it
		}
		if lerr != nil && err == nil {
			err = lerr
		}
		c.lost()
	}
	return err
}

// poll runs one Poll: the pending commit, then fetches until a page has
// records. fromPoll says the page goes to Poll (else to Records).
//
// REQUIRES: c.pollMu held.
func (c *Consumer) poll(ctx context.Context, fromPoll bool) (Page, error) {
	if err := c.checkOpen(); err != nil {
		return Page{}, err
	}
	if !c.opt.ManualCommit {
		c.MarkProcessed()
	}
	for attempt := 1; ; attempt++ {
		p, err := c.pollOnce(ctx)
		if err == nil && len(p.Records) > 0 {
			c.mu.Lock()
			if fromPoll && c.pageEpoch == c.epoch {
				c.unmarked = p.Cursor
			}
			c.mu.Unlock()
			return p, nil
		}
		if err == nil {
			attempt = 0 // an empty page: the node is fine, ask again
			continue
		}
		if cerr := c.checkOpen(); cerr != nil {
			return Page{}, cerr
		}
		if ctx.Err() != nil || !c.retriable(err) {
			return Page{}, err
		}
		if werr := c.pause(ctx, c.c.backoff(attempt)); werr != nil {
			return Page{}, werr
		}
	}
}

// pollOnce settles the start position, commits what was processed and
// fetches one page.
func (c *Consumer) pollOnce(ctx context.Context) (Page, error) {
	if !c.started {
		if err := c.settleStart(ctx); err != nil {
			return Page{}, err
		}
		c.started = true
	}
	if err := c.commitMarked(ctx); err != nil && !errors.Is(err, ErrStaleMember) {
		return Page{}, err
	}
	return c.fetch(ctx)
}

func (c *Consumer) checkOpen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// retriable reports whether Poll should try again after err.
func (c *Consumer) retriable(err error) bool {
	return IsRetriable(err) || errors.Is(err, ErrRequestTimeout)
}

// pause waits d, for ctx or for Close.
func (c *Consumer) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.closing:
		return ErrClosed
	}
}

// fetch reads one page as member. The fetch runs on a goroutine of the
// consumer's, not under ctx: if ctx ends first, the fetch goes on and the
// next Poll takes its page. A fetch given up on could otherwise still
// reach the node after the member left, and join it again.
func (c *Consumer) fetch(ctx context.Context) (Page, error) {
	c.mu.Lock()
	ch := c.inflight
	if ch == nil {
		ch = make(chan fetchResult, 1)
		c.inflight = ch
		opt := FetchOptions{Group: c.opt.Group, Member: c.member, Max: c.opt.MaxRecords, Wait: c.opt.MaxWait}
		go func() {
			p, err := c.c.Fetch(c.life, c.opt.Topic, opt)
			ch <- fetchResult{page: p, err: err}
		}()
	}
	c.mu.Unlock()
	select {
	case r := <-ch:
		fresh := c.settleFetch(r)
		if fresh {
			// Learn the generation while the application processes the
			// page, so that its commit need not wait for it.
			select {
			case c.kick <- struct{}{}:
			default:
			}
		}
		if r.err == nil {
			c.startHeartbeats()
		}
		return r.page, r.err
	case <-ctx.Done():
		return Page{}, context.Cause(ctx)
	case <-c.closing:
		return Page{}, ErrClosed
	}
}

// settleFetch takes the outcome of the fetch under way: an answer joined
// the member, a refusal did not, and a fetch that got neither may have.
// It reports whether the fetch brought records.
func (c *Consumer) settleFetch(r fetchResult) (fresh bool) {
	var refused *Error
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight = nil
	c.unsure = r.err != nil && !errors.As(r.err, &refused)
	if r.err == nil {
		c.joined, c.pageEpoch = true, c.epoch
	}
	fresh = r.err == nil && len(r.page.Records) > 0
	if fresh {
		c.gen = 0
		c.genSeq++
	}
	return fresh
}

// markCursor marks cursor processed, for Records, unless the membership
// that read its page has been lost since epoch.
func (c *Consumer) markCursor(cursor string, epoch uint64) {
	c.mu.Lock()
	if c.epoch == epoch {
		c.marked = cursor
	}
	c.mu.Unlock()
}

func (c *Consumer) lastPageEpoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pageEpoch
}
