package sim

import (
	"errors"
	"fmt"

	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/metadata"
)

// errUnavailable is the control plane's refusal while it is down or cut
// off from the asking node: retriable (metadata_unavailable).
var errUnavailable = errors.New("metadata_unavailable")

// controlPlane is the real metadata state machine behind one
// linearizable order: a command applies at the moment it is called, in
// the simulation's single order of events. It stands for the Raft group
// of the topic's vnode; elections, lost leaders and stale reads are not
// simulated, only its unavailability.
type controlPlane struct {
	w  *world
	st *metadata.State
	up bool
	// version counts the commands applied: views derived from the state
	// are kept until it moves.
	version          uint64
	sealed           []metadata.Segment // sealedSegments at sealedAt
	healSeg          []heal.Segment     // the planner's segments at healAt
	sealedAt, healAt uint64
}

// reachable reports whether node can talk to the control plane.
func (c *controlPlane) reachable(node uint64) bool {
	return c.up && (node == 0 || !c.w.net.isCut(0, node))
}

// apply runs cmd for node, stamped with the simulated time. A command
// the state machine refused comes back as its error; errUnavailable
// means it did not run.
func (c *controlPlane) apply(node uint64, cmd metadata.Command) (metadata.Result, error) {
	if !c.reachable(node) {
		return metadata.Result{}, errUnavailable
	}
	cmd.V, cmd.Now = metadata.Version, c.w.unixNow()
	res := c.st.Apply(cmd)
	c.version++
	c.w.note('c', node, uint64(len(cmd.Kind)), cmd.Range, cmd.Segment, cmd.End, res.SegmentID)
	if traceOut != nil {
		fmt.Fprintf(traceOut, "       %s by n%d: replicas %v expect %v node %s err %v\n", cmd.Kind, node, cmd.Replicas, cmd.Expect, cmd.Node, res.Err)
	}
	if err := c.st.CheckInvariants(); err != nil {
		c.w.chk.fail("C1", "metadata invariants after %s: %v", cmd.Kind, err)
	}
	if res.Err == nil && (cmd.Kind == metadata.KindOpenSegment || cmd.Kind == metadata.KindSealSegment) {
		rangeID := cmd.Range
		if cmd.Kind == metadata.KindSealSegment && res.Sealed != nil {
			rangeID = res.Sealed.Range
		}
		c.w.chk.tiling(rangeID)
	}
	return res, res.Err
}

// head reads a range's write head for a produce (W5: from the control
// plane, never from a cache).
func (c *controlPlane) head(node, rangeID uint64) (metadata.Range, metadata.Segment, bool, error) {
	if !c.reachable(node) {
		return metadata.Range{}, metadata.Segment{}, false, errUnavailable
	}
	r, _ := c.st.Range(rangeID)
	seg, ok := c.st.ActiveSegment(rangeID)
	return r, seg, ok, nil
}

// view is a node's metadata view of a segment. Views are not simulated
// as lagging: a node that cannot reach the control plane still reads the
// last state (catchUp applies the seals it missed when it reconnects).
func (c *controlPlane) view(id uint64) (metadata.Segment, bool) { return c.st.Segment(id) }
