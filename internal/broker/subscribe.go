package broker

import (
	"context"
	"errors"
	"time"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// Subscription pushes pages to one stream-mode connection under a credit
// window: at most Window records are unacknowledged at any time, and each
// push carries at most Max. An ack commits the group's position and
// returns credit in one step, as wire v1 specifies. A member's ack commits
// only its assigned ranges.
type Subscription struct {
	b      *Broker
	topic  string
	group  *string
	member *string
	owner  string // whom a group the member creates is charged to
	window int
	max    int
	// maxBytes, when positive, makes this a v2 subscription: pages of
	// stored batches of at most maxBytes (the first batch whole).
	maxBytes int
	pos      position
	// skips are the deleted records pos passed on reads that pushed no
	// page: the next page pushed tells them.
	skips skips
	// gen is the member's assignment generation that pos has caught up
	// with (0: none yet).
	gen uint64
	// failingSince is when the member's refreshes began to fail (zero
	// while they succeed); see refresh.
	failingSince time.Time
	acks         chan subAck
	// ended is closed when Run returns: nothing drains acks after that, so
	// an Ack waiting for room must stop waiting.
	ended chan struct{}
}

type subAck struct {
	cursor *string
	count  int
}

// errStreamEnded: an Ack after the stream's Run returned.
var errStreamEnded = errors.New("broker: stream ended")

// maxQueuedAcks bounds the acks a connection may have waiting; a client
// that outruns the subscription's commits is slowed down, not buffered.
const maxQueuedAcks = 1024

// Subscribe is SubscribeAs for the node's own account (not accounted).
func (b *Broker) Subscribe(topic string, group, member *string, window, max int) (*Subscription, error) {
	return b.SubscribeAs(Identity{}, topic, group, member, window, max)
}

// SubscribeAs prepares a subscription of id starting at the group's
// committed position (or the start without a group). A group the member
// creates is charged to id, as in Fetch.
func (b *Broker) SubscribeAs(id Identity, topic string, group, member *string, window, max int) (*Subscription, error) {
	pos, err := b.startPosition(FetchRequest{Topic: topic, Group: group, Member: member, Identity: id})
	if err != nil {
		return nil, err
	}
	return &Subscription{
		b: b, topic: topic, group: group, member: member, owner: groupOwner(id),
		window: window, max: max, pos: pos,
		acks:  make(chan subAck, maxQueuedAcks),
		ended: make(chan struct{}),
	}, nil
}

// SubscribeBatchesAs is SubscribeAs for wire v2: pages of stored batches
// of at most maxBytes each (clamped to FetchMaxBytes), in Page.Batches.
// The window counts records, exactly: a page ends inside a batch rather
// than pass it.
func (b *Broker) SubscribeBatchesAs(id Identity, topic string, group, member *string, window, maxBytes int) (*Subscription, error) {
	s, err := b.SubscribeAs(id, topic, group, member, window, window)
	if err != nil {
		return nil, err
	}
	s.maxBytes = b.cfg.FetchMaxBytes
	if maxBytes > 0 {
		s.maxBytes = min(maxBytes, s.maxBytes)
	}
	return s, nil
}

// Ack queues an acknowledgement: the cursor (nil for a heartbeat) is
// committed and count credits return. It blocks while the queue is full.
func (s *Subscription) Ack(ctx context.Context, cur *string, count int) error {
	select {
	case s.acks <- subAck{cursor: cur, count: count}:
		return nil
	case <-s.ended:
		return errStreamEnded
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run pushes pages through send until ctx ends or send fails. send takes
// each page over, its Release included, whether it succeeds or not. It is called
// once, from the connection's own goroutine, and returns when the stream
// ends; a member leaves its group then.
func (s *Subscription) Run(ctx context.Context, send func(Page) error) error {
	defer close(s.ended)
	if s.member != nil && s.group != nil {
		defer s.b.LeaveGroup(s.topic, *s.group, *s.member)
	}
	w := s.b.watchFor(s.pos.topicID)
	inFlight := 0
	for {
		woken, at := w.waitGen()
		refreshed, err := s.refresh()
		if err != nil {
			return err
		}
		if credit := min(s.max, s.window-inFlight); refreshed && credit > 0 {
			page, n, cut, err := s.read(ctx, credit, at)
			if err != nil {
				return err
			}
			if n > 0 {
				// send owns the page: it releases it once written, or
				// when it fails.
				if err := send(page); err != nil {
					return err
				}
				s.skips = skips{}
				inFlight += n
				continue
			}
			if cut {
				continue // passed over what it read, found nothing yet: read on
			}
		}
		t := s.b.cfg.Clock.NewTimer(s.idleRefresh())
		awake := s.b.sleeping(w, s.pos.topicID)
		select {
		case <-ctx.Done():
			t.Stop()
			awake()
			return ctx.Err()
		case <-woken:
		case a := <-s.acks:
			if err := s.applyAck(ctx, a); err != nil {
				t.Stop()
				awake()
				return err
			}
			inFlight = max(inFlight-a.count, 0)
		case <-t.C():
		}
		awake()
		t.Stop()
		if s.b.closed.Load() {
			return ErrShuttingDown
		}
	}
}

// read reads the next page within credit records, and says how many
// records it holds; a v2 page ends inside a batch rather than pass it.
// cut says the page's scan bound ended it: read again at once. at is the
// topic's watch as taken before the read. A page empty while a range's
// end is unknown (errEndUnknown) is no error here: like an empty page,
// nothing is pushed, and the stream waits for the watch (a failover's
// seal fires it), an ack or its refresh timer before it reads again.
func (s *Subscription) read(ctx context.Context, credit int, at seen) (page Page, n int, cut bool, err error) {
	before := s.pos.entries
	if s.maxBytes <= 0 {
		recs, after, cut, err := s.b.readPage(ctx, s.pos, credit, at)
		if err != nil && !errors.Is(err, errEndUnknown) {
			return Page{}, 0, false, err
		}
		s.pos = after
		page := s.b.page(s.pos, recs)
		page.Skipped, page.SkippedBound = s.skipped(before)
		return page, len(recs), cut, nil
	}
	batches, after, cut, hold, err := s.b.readBatchPage(ctx, s.pos, budget{records: credit, bytes: s.maxBytes}, at)
	if err != nil && !errors.Is(err, errEndUnknown) {
		return Page{}, 0, false, err
	}
	s.pos = after
	for _, rb := range batches {
		h, err := segment.ParseHeader(rb.Batch)
		if err != nil {
			hold.release()
			return Page{}, 0, false, err
		}
		n += int(h.RecordCount)
	}
	page = s.b.page(s.pos, nil)
	page.Batches, page.hold = batches, hold
	page.Skipped, page.SkippedBound = s.skipped(before)
	return page, n, cut, nil
}

// skipped counts the deleted records the subscription's position passed
// since before (skips.go), with those of earlier reads no page told.
func (s *Subscription) skipped(before []cursor.Entry) (uint64, bool) {
	s.skips.add(s.b.skipsBetween(s.pos.topicID, before, s.pos.entries))
	return s.skips.n, s.skips.bound
}

// applyAck commits an acknowledged cursor. A pushed cursor carries every
// range the subscription knows of, the other members' at wherever it found
// them, so a member commits only the ranges assigned to it now (with their
// ancestors' entries for those ranges' slices). An ack for a range that has
// since moved to another member is therefore dropped, not refused: stream
// acks have no answer to carry a refusal, and the new owner reads on from
// the last commit, so at worst it delivers those records again.
func (s *Subscription) applyAck(ctx context.Context, a subAck) error {
	if a.cursor == nil || s.group == nil {
		return nil
	}
	// By name, as a commit does: a topic deleted and created again under
	// the same name refuses the old topic's cursors.
	topicID, err := s.b.topicID(s.topic)
	if err != nil {
		return err
	}
	c, err := cursor.Decode(s.b.secret, topicID, *a.cursor)
	if err != nil {
		return ErrInvalidCursor
	}
	entries := c.Entries
	if s.member != nil {
		entries = s.b.memberEntries(topicID, s.pos.only, entries)
	}
	return s.b.commitEntries(ctx, s.topic, topicID, *s.group, entries)
}

// idleRefresh is how long an idle subscription waits before it refreshes
// its membership. A member that joins is handed ranges another member
// holds only once that member has polled again, so a group member waits
// at most a second, not a third of the group member timeout.
func (s *Subscription) idleRefresh() time.Duration {
	d := s.b.cfg.GroupSessionTimeout / 3
	if s.member != nil && s.group != nil {
		d = min(d, time.Second)
	}
	return d
}

// refreshMember heartbeats a member and narrows its reads to the ranges
// the coordinator currently assigns it. When the assignment has changed,
// the group's committed position is merged into the subscription's own:
// ranges it takes over (from a member that left, or children of a split
// range another member read) continue from their latest commit, not from
// where this subscription started.
func (s *Subscription) refreshMember() error {
	if s.member == nil || s.group == nil {
		return nil
	}
	var ranges []uint64
	_ = s.b.plane.ViewTopic(s.pos.topicID, func(st *metadata.State) { ranges = activeIDs(st, s.pos.topicID) })
	a, committed, err := s.b.memberAssignment(s.pos.topicID, *s.group, *s.member, s.owner, ranges)
	if err != nil {
		return err
	}
	s.pos.only = a.Ranges
	if a.Generation != s.gen {
		var stored []metadata.GroupEntry
		_ = s.b.plane.ViewTopic(s.pos.topicID, func(st *metadata.State) { stored = st.GroupEntries(*s.group, s.pos.topicID) })
		s.pos.entries = cursor.Merge(s.pos.entries, toCursorEntries(stored))
		s.pos.entries = cursor.Merge(s.pos.entries, committed) // the coordinator's view (see memberAssignment)
		s.gen = a.Generation
	}
	return nil
}

// refresh is refreshMember for Run. A refusal the member may retry (the
// coordinator is busy, moving, or not reachable for now) does not end the
// subscription: it reads nothing until a refresh succeeds (ok false), as
// it may no longer hold the ranges it read, and tries again on its next
// wake, at most a second later. Only when refreshes have failed for a
// whole session timeout, after which the coordinator has evicted the
// member anyway, does the error end the stream.
func (s *Subscription) refresh() (ok bool, err error) {
	err = s.refreshMember()
	if err == nil {
		s.failingSince = time.Time{}
		return true, nil
	}
	if !retriableRefresh(err) {
		return false, err
	}
	now := s.b.cfg.Clock.Now()
	if s.failingSince.IsZero() {
		s.failingSince = now
	}
	if now.Sub(s.failingSince) > s.b.cfg.GroupSessionTimeout {
		return false, err
	}
	return false, nil
}

// retriableRefresh reports whether a failed membership refresh may
// succeed if tried again later.
func retriableRefresh(err error) bool {
	for _, e := range []error{ErrTooManyRequests, ErrMetadataUnavailable, ErrRetry, ErrUnreachable} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
