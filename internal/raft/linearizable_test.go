package raft

// Linearizability of a key-value state machine on three hosts under
// dropped, delayed and partitioned frames. Clients issue puts (Propose)
// and gets (ReadBarrier, then a read of the local state machine) against
// random nodes; the recorded history is checked with porcupine. A put whose
// outcome is unknown (timeout, leadership lost) stays in the history with
// no return: it may or may not have happened. Refused requests are left
// out: they did not happen.
//
// The fast run checks a handful of seeds; MALACHI_RAFT_SEEDS=N runs N
// seeds (for example 500 before a release).

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

type kvInput struct {
	put   bool
	key   string
	value string
}

var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(kvInput)
		if in.put {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(kvInput)
		if in.put {
			return fmt.Sprintf("put(%s, %s)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) → %q", in.key, output)
	},
}

type linClient struct {
	id      int
	pending *Future
	node    uint64
	input   kvInput
	call    int64
}

func TestLinearizableUnderFaults(t *testing.T) {
	seeds := 20
	if s, err := strconv.Atoi(os.Getenv("MALACHI_RAFT_SEEDS")); err == nil && s > 0 {
		seeds = s
	}
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { checkLinearizable(t, uint64(seed)) })
	}
}

func checkLinearizable(t *testing.T, seed uint64) {
	n := newSim(t, 1000+seed, 3, func(o *Options) { o.SnapshotEvery, o.CompactMargin = 25, 5 })
	n.dropRate, n.maxDelay = 0.05, 2
	n.createGroup(1, n.ids)
	var now int64
	clock := func() int64 { now++; return now }
	var history []porcupine.Operation
	clients := make([]*linClient, 5)
	for i := range clients {
		clients[i] = &linClient{id: i}
	}
	keys := []string{"a", "b"}
	puts := 0
	finish := func(c *linClient) {
		_, err := c.pending.Result()
		op := porcupine.Operation{ClientId: c.id, Input: c.input, Call: c.call}
		switch {
		case err == nil && c.input.put:
			op.Output, op.Return = "", clock()
		case err == nil:
			op.Output, op.Return = n.sms[c.node][1].data[c.input.key], clock()
		case c.input.put:
			op.Output, op.Return = "", math.MaxInt64 // outcome unknown
		default:
			c.pending = nil
			return // a failed read has no effect
		}
		history = append(history, op)
		c.pending = nil
	}
	start := func(c *linClient) {
		c.node = n.ids[n.rng.IntN(len(n.ids))]
		if l := n.leader(1); l != 0 && n.rng.IntN(3) > 0 {
			c.node = l
		}
		h := n.hosts[c.node]
		c.input = kvInput{put: n.rng.IntN(2) == 0, key: keys[n.rng.IntN(len(keys))]}
		c.call = clock()
		var f *Future
		var err error
		if c.input.put {
			puts++
			c.input.value = fmt.Sprintf("v%d", puts)
			f, err = h.ProposeAsync(1, putCmd(c.input.key, c.input.value))
		} else {
			f, err = h.ReadIndexAsync(1)
		}
		if err != nil {
			var nl *NotLeaderError
			if !errors.As(err, &nl) && !errors.Is(err, ErrTooManyProposals) {
				t.Fatalf("request refused unexpectedly: %v", err)
			}
			return // refused: never happened
		}
		c.pending = f
	}
	const ticks = 300
	for tick := 0; tick < ticks+60; tick++ {
		if tick < ticks {
			n.faults(tick)
			for _, c := range clients {
				if c.pending == nil && n.rng.IntN(3) == 0 {
					start(c)
				}
			}
		} else if tick == ticks {
			n.heal()
		}
		n.tick()
		for _, c := range clients {
			if c.pending == nil {
				continue
			}
			select {
			case <-c.pending.Done():
				finish(c)
			default:
			}
		}
	}
	for _, c := range clients {
		if c.pending != nil && c.input.put {
			history = append(history, porcupine.Operation{ClientId: c.id, Input: c.input, Call: c.call, Output: "", Return: math.MaxInt64})
		}
	}
	completed := 0
	for _, op := range history {
		if op.Return != math.MaxInt64 {
			completed++
		}
	}
	if completed < 50 {
		t.Fatalf("only %d operations completed; the run exercised too little", completed)
	}
	res, info := porcupine.CheckOperationsVerbose(kvModel, history, 10*time.Second)
	if res == porcupine.Illegal {
		path := fmt.Sprintf("%s/lin-%d.html", t.TempDir(), seed)
		if f, err := os.Create(path); err == nil {
			_ = porcupine.Visualize(kvModel, info, f)
			f.Close()
		}
		t.Fatalf("seed %d: history of %d operations is not linearizable (visualization: %s)", seed, len(history), path)
	}
	t.Logf("seed %d: %d operations (%d completed), %s", seed, len(history), completed, res)
}

// faults partitions one node for a while every 60 ticks.
func (n *simNet) faults(tick int) {
	switch tick % 60 {
	case 10:
		n.partition(n.ids[n.rng.IntN(len(n.ids))])
	case 40:
		n.heal()
	}
}
