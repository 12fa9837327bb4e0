package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// memberWait is the long poll of a group member once drained. The node
// reads a fetch's ranges as assigned when it began, and a range moving to
// a member that joined waits for its old reader to fetch again (see
// internal/groups, Handoff), so this bounds how long a handoff takes. It
// is well inside the node's session timeout, which a member's fetches
// keep alive.
const memberWait = 2 * time.Second

// leave takes the member out of its group once its last page is printed
// and committed (emit commits before the next fetch), so the others take
// its ranges now, from that commit, rather than after the group's member timeout.
// It runs after Ctrl-C too, so it does not use the cancelled context.
func (c *consumer) leave(ctx context.Context) {
	if !c.joined {
		return // refused from the start (no topic, no permission): nothing to leave
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.s.c.LeaveGroup(lctx, c.topic, c.f.group, c.f.member); err != nil {
		// The node evicts a silent member after its session timeout; say
		// why the others may wait that long.
		fmt.Fprintf(c.s.out.errw, "note: could not leave group %s (%s); its ranges move once the node times the member out\n",
			safeText(c.f.group), safeText(explainText(err, errSubject{set: c.s.set})))
	}
}

// memberFetch is a member's fetch. Ctrl-C does not cancel it: the node
// joins the member when it starts serving a fetch, and a fetch given up
// here may still be on its way there, to be served after the leave that
// follows and join the member again, keeping its ranges from the others
// until its group membership times out. So the fetch runs to its answer (a long
// poll ends within memberWait), and a page that comes after Ctrl-C is
// neither printed nor committed: the group's next reader gets it.
func (c *consumer) memberFetch(ctx context.Context, opt client.FetchOptions) (client.Page, error) {
	page, err := c.s.c.Fetch(context.WithoutCancel(ctx), c.topic, opt)
	c.joined = c.joined || err == nil
	if ctx.Err() != nil {
		return client.Page{}, ctx.Err()
	}
	return page, err
}

// noteIdle explains a member without --follow that stopped having printed
// nothing while other members are live: its ranges may be drained, or
// still held by a member that has not fetched since they moved (see
// memberWait), which only waiting can tell apart. Said once, on stderr;
// a failed look says nothing.
func (c *consumer) noteIdle(ctx context.Context) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g, err := c.s.c.DescribeGroupMembers(dctx, c.topic, c.f.group)
	if err != nil {
		return
	}
	var others []string
	for _, m := range g.Members {
		if m.Name != c.f.member {
			others = append(others, safeText(m.Name))
		}
	}
	if len(others) == 0 {
		return
	}
	fmt.Fprintf(c.s.out.errw, "note: member %s read nothing: its ranges of group %s are drained, or still held by "+
		"another member (%s) until it fetches again; use --follow to wait for them\n",
		safeText(c.f.member), safeText(c.f.group), strings.Join(others, ", "))
}
