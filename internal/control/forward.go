package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/raft"
)

// Requests between nodes on peer.ChannelForward, JSON both ways:
//
//	propose  Group, Data (an encoded entry): propose it here, where the
//	         caller believes the group's leader is; never forwarded again.
//	join     Node: register the node in the root group (forwarded to the
//	         root's leader as needed); the answer carries the registry.
//	remove   Data (an encoded remove_node entry): at the root's leader,
//	         check that the removal leaves every group a live quorum,
//	         then propose it; never forwarded again.
//
// A response holds the state machine's answer, or a code saying why not:
// not_leader (with the leader this node knows), retry (an unknown outcome
// or a refusal worth retrying elsewhere), refused (a refusal whose text
// is for the operator as it is) or failed (not retriable).
type fwdRequest struct {
	Op    string      `json:"op"`
	Group uint64      `json:"group,omitempty"`
	Data  []byte      `json:"data,omitempty"`
	Node  *NodeRecord `json:"node,omitempty"`
	Apply bool        `json:"apply,omitempty"` // rebalance: commit the plan
}

type fwdResponse struct {
	Result json.RawMessage `json:"result,omitempty"`
	// Index is, for a propose, the index the leader's replica had
	// applied when the entry's result was ready (at or past the entry):
	// the proposer waits for its own replica to reach it.
	Index  uint64 `json:"index,omitempty"`
	Code   string `json:"code,omitempty"`
	Leader uint64 `json:"leader,omitempty"`
	Msg    string `json:"msg,omitempty"`
}

const (
	opPropose = "propose"
	opJoin    = "join"
	opRemove  = "remove"
	// opRebalance: at the root's leader, plan a rebalance and, with
	// Apply, commit it; the answer is the plan. Never forwarded again.
	opRebalance = "rebalance"

	codeNotLeader = "not_leader"
	codeRetry     = "retry"
	codeRefused   = "refused"
	codeFailed    = "failed"
)

// refusal is a request refused for a reason the operator acts on; its
// text crosses nodes unchanged.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

// errRemoteUnavailable wraps a retriable failure reported by another node.
var errRemoteUnavailable = errors.New("control: remote node could not complete the request")

// joinTicks bounds the time a node spends on another's join request.
const joinTicks = 100

// serveForward answers forwarded requests. It runs on the transport's
// bounded handler pool; ctx ends with the caller's connection.
func (n *Node) serveForward(ctx context.Context, from uint64, req []byte) ([]byte, error) {
	var r fwdRequest
	if err := json.Unmarshal(req, &r); err != nil {
		return nil, fmt.Errorf("control: bad forwarded request from node %d: %v", from, err)
	}
	var res []byte
	var err error
	switch r.Op {
	case opPropose:
		if n.sm(r.Group) == nil {
			err = ErrUnknownGroup
		} else if res, err = n.host.Propose(ctx, r.Group, r.Data); err == nil {
			st, serr := n.host.Status(r.Group)
			if serr != nil {
				err = serr
				break
			}
			resp := responseFor(res, nil)
			resp.Index = st.Applied
			return json.Marshal(resp)
		}
	case opRemove:
		res, err = n.removeHere(ctx, r.Data)
	case opRebalance:
		res, err = n.rebalanceHere(ctx, r.Apply)
	case opJoin:
		if r.Node == nil {
			return nil, errors.New("control: join without a node record")
		}
		jctx, cancel := n.withTicks(ctx, joinTicks)
		defer cancel()
		var out outcome
		if out, err = n.proposeEntry(jctx, RootGroup, entry{Reg: &regCommand{Kind: regRegister, Node: *r.Node}}); err == nil {
			res = encodeOutcome(out)
		}
	default:
		return nil, fmt.Errorf("control: unknown forwarded op %q", r.Op)
	}
	return json.Marshal(responseFor(res, err))
}

func responseFor(res []byte, err error) fwdResponse {
	var nl *raft.NotLeaderError
	var ref *refusal
	switch {
	case err == nil:
		return fwdResponse{Result: res}
	case errors.As(err, &ref):
		return fwdResponse{Code: codeRefused, Msg: ref.msg}
	case errors.As(err, &nl):
		return fwdResponse{Code: codeNotLeader, Leader: nl.Leader, Msg: err.Error()}
	case retriable(err) || errors.Is(err, ErrUnavailable):
		return fwdResponse{Code: codeRetry, Msg: err.Error()}
	}
	return fwdResponse{Code: codeFailed, Msg: err.Error()}
}

// forwardPropose asks node to propose data in group; it returns the
// result and the index the node's replica had applied with it (0 from a
// node that does not say).
func (n *Node) forwardPropose(ctx context.Context, node, group uint64, data []byte) ([]byte, uint64, error) {
	resp, err := n.callResponse(ctx, node, group, fwdRequest{Op: opPropose, Group: group, Data: data})
	if err != nil {
		return nil, 0, err
	}
	return resp.Result, resp.Index, nil
}

func (n *Node) call(ctx context.Context, node, group uint64, r fwdRequest) ([]byte, error) {
	resp, err := n.callResponse(ctx, node, group, r)
	if err != nil {
		return nil, err
	}
	return resp.Result, nil
}

// callResponse sends r to node and turns an answer's code into an error.
func (n *Node) callResponse(ctx context.Context, node, group uint64, r fwdRequest) (fwdResponse, error) {
	req, err := json.Marshal(r)
	if err != nil {
		return fwdResponse{}, err
	}
	b, err := n.tr.Call(ctx, node, peer.ChannelForward, req)
	if err != nil {
		return fwdResponse{}, err
	}
	var resp fwdResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		return fwdResponse{}, fmt.Errorf("control: bad answer from node %d: %v", node, err)
	}
	switch resp.Code {
	case "":
		return resp, nil
	case codeNotLeader:
		return fwdResponse{}, &raft.NotLeaderError{Group: group, Leader: resp.Leader}
	case codeRetry:
		return fwdResponse{}, fmt.Errorf("%w: node %d: %s", errRemoteUnavailable, node, resp.Msg)
	case codeRefused:
		return fwdResponse{}, &refusal{msg: resp.Msg}
	}
	return fwdResponse{}, fmt.Errorf("control: node %d: %s", node, resp.Msg)
}

// withTicks is ctx, also cancelled after ticks raft ticks of the Node's
// clock. The goroutine it starts ends with the returned context.
func (n *Node) withTicks(ctx context.Context, ticks int) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	t := n.cfg.Clock.NewTimer(time.Duration(ticks) * n.cfg.TickInterval)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
