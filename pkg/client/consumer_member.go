package client

import (
	"context"
	"errors"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// The member protocol of a Consumer, as the node expects it (see
// docs/wire.md, "Group members"): fetch as member, which joins the group
// and hands the member its ranges until it fetches again; heartbeat
// (member_heartbeat) while the page is processed, which keeps the
// membership and the ranges and tells the generation; commit
// (member_commit) with that generation before the next fetch; leave at
// the end.

// settleStart moves a group that has not started to the start position
// the options ask for. A group has started once it has a committed
// position or a live member: a member may be reading records it has not
// committed yet, and moving the group past them (a commit only moves it
// forward, and every member fetches from it) would lose them for the
// group. Consumers that start together and each do this agree, since a
// commit only moves a group forward; but as the check and the commit are
// two requests, a member that joins in between may be given records the
// commit then moves the group past (see ConsumerOptions.Start).
func (c *Consumer) settleStart(ctx context.Context) error {
	s := c.opt.Start
	if s.kind == startBeginning {
		return nil
	}
	fresh, err := c.groupFresh(ctx)
	if err != nil || !fresh {
		return err
	}
	cur := ""
	switch s.kind {
	case startEnd:
		cur, err = c.c.EndCursor(ctx, c.opt.Topic)
	case startTime:
		cur, err = c.c.CursorAt(ctx, c.opt.Topic, s.at)
	case startCursor:
		cur = s.cursor
	}
	if err != nil || cur == "" {
		return err
	}
	return c.plainCommit(ctx, cur)
}

// groupFresh reports whether the group has neither a committed position
// nor a live member. describe_group_members says so without the lag
// scan of describe_group; a node that predates it is asked the latter,
// which tells only of a committed position.
func (c *Consumer) groupFresh(ctx context.Context) (bool, error) {
	_, err := c.c.DescribeGroupMembers(ctx, c.opt.Topic, c.opt.Group)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, ErrNotFound):
		return true, nil
	case !errors.Is(err, ErrUnknownAPIKey):
		return false, err
	}
	g, err := c.c.DescribeGroup(ctx, c.opt.Topic, c.opt.Group)
	switch {
	case errors.Is(err, ErrNotFound):
		return true, nil
	case err != nil:
		return false, err
	}
	return g.Cursor == "", nil
}

// plainCommit commits cur as the group's position without naming the
// member (commit, key 4): for start positions, and for nodes that predate
// member_commit.
func (c *Consumer) plainCommit(ctx context.Context, cur string) error {
	req := wire.CommitRequest{Topic: str(c.opt.Topic), Group: str(c.opt.Group), Cursor: str(cur)}
	return c.c.do(ctx, request{req: req, resend: true})
}

// leave takes the member out of its group (leave_group, key 7).
func (c *Consumer) leave(ctx context.Context) error {
	req := wire.LeaveGroupRequest{Topic: str(c.opt.Topic), Group: str(c.opt.Group), Member: str(c.member)}
	return c.c.do(ctx, request{req: req, resend: true})
}

// commitMarked commits the marked cursor, confirmed. A generation not
// known yet (the fetch that read the page joined the group) is asked for
// first. A stale member's commit is dropped with the records it covered.
func (c *Consumer) commitMarked(ctx context.Context) error {
	c.mu.Lock()
	cur, gen, legacy := c.marked, c.gen, c.legacy
	c.mu.Unlock()
	if cur == "" {
		return nil
	}
	if !legacy && gen == 0 {
		if err := c.touch(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		gen, legacy = c.gen, c.legacy
		c.mu.Unlock()
	}
	var err error
	if !legacy {
		req := wire.MemberCommitRequest{
			Topic: str(c.opt.Topic), Group: str(c.opt.Group), Member: str(c.member),
			Generation: gen, Cursor: str(cur),
		}
		err = c.c.do(ctx, request{req: req, resend: true})
		if errors.Is(err, ErrUnknownAPIKey) {
			c.setLegacy()
			legacy = true
		}
	}
	if legacy {
		err = c.plainCommit(ctx, cur)
	}
	switch {
	case err == nil:
		c.mu.Lock()
		if c.marked == cur {
			c.marked = ""
		}
		c.mu.Unlock()
	case errors.Is(err, ErrStaleMember):
		c.lost()
	}
	return err
}

// touch sends a heartbeat and learns the consumer's share from it.
func (c *Consumer) touch(ctx context.Context) error {
	c.mu.Lock()
	seq := c.genSeq
	c.mu.Unlock()
	var resp wire.MemberStateResponse
	req := wire.MemberHeartbeatRequest{Topic: str(c.opt.Topic), Group: str(c.opt.Group), Member: str(c.member)}
	err := c.c.do(ctx, request{req: req, resp: &resp, resend: true})
	switch {
	case err == nil:
		c.learn(resp, seq)
	case errors.Is(err, ErrUnknownAPIKey):
		c.setLegacy()
		return nil
	case errors.Is(err, ErrStaleMember):
		c.lost()
	}
	return err
}

// setLegacy falls back to plain commits for a node that predates the
// member keys.
func (c *Consumer) setLegacy() {
	c.mu.Lock()
	c.legacy = true
	c.mu.Unlock()
}

// learn keeps a heartbeat's answer; seq is genSeq when it was sent.
func (c *Consumer) learn(resp wire.MemberStateResponse, seq uint64) {
	a := Assignment{Generation: resp.Generation, Slices: int(resp.Ranges), Members: int(resp.Members)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.joined {
		return // lost or left while the heartbeat was under way
	}
	if seq == c.genSeq {
		c.gen = a.Generation
	}
	if a != c.share {
		c.share = a
		c.events.assigned(a)
	}
}

// lost forgets a membership the node no longer has: its generation, and
// the pages read under it, which are no longer the consumer's to commit.
func (c *Consumer) lost() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.joined || c.share.Generation != 0 {
		c.events.revoked(c.share)
	}
	c.gen, c.share, c.joined, c.unsure = 0, Assignment{}, false, false
	c.marked, c.unmarked = "", ""
	c.epoch++
}

// startHeartbeats starts the heartbeat goroutine once the consumer has
// joined its group.
func (c *Consumer) startHeartbeats() {
	if c.opt.HeartbeatInterval < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hbDone != nil || c.closed {
		return
	}
	c.hbDone = make(chan struct{})
	go c.heartbeats(c.hbDone)
}

// heartbeats keeps the membership alive while the application processes
// a page, learns the generation of each page fetched (kick) and of
// rebalances meanwhile. It exits when the consumer closes, or when its
// Client does.
func (c *Consumer) heartbeats(done chan struct{}) {
	defer close(done)
	t := time.NewTicker(c.opt.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.life.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		if c.c.checkOpen() != nil {
			return // the Client was closed under the consumer
		}
		c.mu.Lock()
		skip := !c.joined || c.legacy
		c.mu.Unlock()
		if skip {
			continue // the next fetch joins; the node knows nothing to keep
		}
		if err := c.touch(c.life); errors.Is(err, ErrClosed) {
			return
		}
	}
}

// pendingEvents holds the assignment changes the application has not
// been told yet: at most one revocation, then at most one assignment,
// the latest.
type pendingEvents struct {
	revokedShare  *Assignment
	assignedShare *Assignment
}

func (e *pendingEvents) revoked(a Assignment) {
	if e.revokedShare == nil {
		e.revokedShare = &a
	}
	e.assignedShare = nil
}

func (e *pendingEvents) assigned(a Assignment) { e.assignedShare = &a }

// fire calls the callbacks of the pending events, on the caller's
// goroutine, with no lock held, so that a callback may call the
// Consumer's methods (Commit from OnRevoked, say). One goroutine calls
// them at a time, in order: events that arrive while another goroutine
// (or a callback of this one, calling Commit) is calling them are left to
// it, and it calls them before it stops.
func (c *Consumer) fire() {
	c.mu.Lock()
	if c.firing {
		c.mu.Unlock()
		return
	}
	c.firing = true
	finished := false
	defer func() {
		if !finished { // a callback panicked: let the next call fire
			c.mu.Lock()
			c.firing = false
			c.mu.Unlock()
		}
	}()
	for {
		ev := c.events
		c.events = pendingEvents{}
		if ev.revokedShare == nil && ev.assignedShare == nil {
			c.firing, finished = false, true
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		if ev.revokedShare != nil && c.opt.OnRevoked != nil {
			c.opt.OnRevoked(*ev.revokedShare)
		}
		if ev.assignedShare != nil && c.opt.OnAssigned != nil {
			c.opt.OnAssigned(*ev.assignedShare)
		}
		c.mu.Lock()
	}
}
