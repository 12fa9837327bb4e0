package control

// Linearizability of metadata operations made through different nodes
// (C2): clients create, delete and describe a few topics through random
// nodes while one node is cut off from the others for a while. Describe
// is Barrier then a read of the local replica. The history is checked
// with porcupine against a model of one topic per partition. A write whose
// outcome is unknown (ErrUnavailable) stays in the history with no return
// and may be placed anywhere after its call, or nowhere in effect.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/malachi-log/malachi/internal/metadata"
)

type topicOp struct {
	kind string // create, delete, describe
	name string
}

type topicOut struct {
	unknown bool
	ok      bool // create/delete took effect; describe found the topic
}

var topicModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byName := map[string][]porcupine.Operation{}
		var names []string
		for _, op := range history {
			n := op.Input.(topicOp).name
			if _, seen := byName[n]; !seen {
				names = append(names, n)
			}
			byName[n] = append(byName[n], op)
		}
		var out [][]porcupine.Operation
		for _, n := range names {
			out = append(out, byName[n])
		}
		return out
	},
	Init: func() any { return false },
	Step: func(state, input, output any) (bool, any) {
		exists, in, out := state.(bool), input.(topicOp), output.(topicOut)
		switch in.kind {
		case "create":
			return out.unknown || out.ok == !exists, true
		case "delete":
			return out.unknown || out.ok == exists, false
		}
		return out.ok == exists, exists
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(topicOp), output.(topicOut)
		if out.unknown {
			return fmt.Sprintf("%s(%s) → ?", in.kind, in.name)
		}
		return fmt.Sprintf("%s(%s) → %v", in.kind, in.name, out.ok)
	},
}

func TestLinearizableCreateDescribe(t *testing.T) {
	c := threeNodes(t, 4)
	var clockSeq atomic.Int64
	var mu sync.Mutex
	var history []porcupine.Operation
	names := []string{"lin-a", "lin-b", "lin-c"}

	var wg sync.WaitGroup
	for client := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(client), 7))
			for range 25 {
				in := topicOp{kind: []string{"create", "delete", "describe"}[rng.IntN(3)], name: names[rng.IntN(len(names))]}
				node := c.node(uint64(rng.IntN(3) + 1))
				call := clockSeq.Add(1)
				out, err := runTopicOp(node, in)
				if err != nil {
					t.Error(err)
					return
				}
				ret := clockSeq.Add(1)
				if out.unknown {
					if in.kind == "describe" {
						continue // a read that did not answer did nothing
					}
					ret = math.MaxInt64
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	// Cut node 1 off for a while, mid-run.
	c.waitFor("some history", 2000, func() bool { mu.Lock(); defer mu.Unlock(); return len(history) > 20 })
	c.net.Partition(1, 2)
	c.net.Partition(1, 3)
	start := c.ticks.Load()
	c.waitFor("a partition of 60 ticks", 100, func() bool { return c.ticks.Load()-start >= 60 })
	c.net.HealAll()
	wg.Wait()

	unknown := 0
	for _, op := range history {
		if op.Output.(topicOut).unknown {
			unknown++
		}
	}
	t.Logf("%d operations, %d with unknown outcome", len(history), unknown)
	if res := porcupine.CheckOperationsTimeout(topicModel, history, 30*time.Second); res != porcupine.Ok {
		t.Fatalf("history is not linearizable (%v); %d operations", res, len(history))
	}
}

func runTopicOp(n *Node, in topicOp) (topicOut, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if in.kind == "describe" {
		if err := n.BarrierTopic(ctx, in.name); err != nil {
			return topicOut{unknown: true}, nil
		}
		var ok bool
		_ = n.ViewTopicName(in.name, func(st *metadata.State) { _, ok = st.Topic(in.name) })
		return topicOut{ok: ok}, nil
	}
	cmd := metadata.Command{V: metadata.Version, Kind: metadata.KindCreateTopic, Topic: in.name}
	if in.kind == "delete" {
		cmd.Kind = metadata.KindDeleteTopic
	}
	res, err := n.Apply(ctx, cmd)
	switch {
	case err != nil:
		return topicOut{unknown: true}, nil
	case res.Err == nil:
		return topicOut{ok: true}, nil
	case errors.Is(res.Err, metadata.ErrAlreadyExists), errors.Is(res.Err, metadata.ErrNoSuchTopic):
		return topicOut{}, nil
	}
	return topicOut{}, fmt.Errorf("%s %s: %v", in.kind, in.name, res.Err)
}
