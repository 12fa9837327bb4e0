package control

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/malachi-log/malachi/internal/metadata"
)

// entry is the payload of a Raft entry of a control group: one metadata
// command or one registry command, with the request id that makes a
// retried proposal apply once. JSON, like the metadata commands: the tags
// are frozen.
type entry struct {
	// Origin and Req identify the request: the proposing node and a
	// random id it drew for this Apply. A proposal retried after an
	// ambiguous failure carries the same pair, and the state machine
	// answers the second copy with the first one's result.
	Origin uint64            `json:"o,omitempty"`
	Req    uint64            `json:"r,omitempty"`
	Meta   *metadata.Command `json:"m,omitempty"`
	Reg    *regCommand       `json:"g,omitempty"`
}

// outcome is a state machine's answer to an entry, as the proposer gets
// it back: a metadata.Result with its error as its reason string, or a
// registry result.
type outcome struct {
	Err       string            `json:"err,omitempty"` // a metadata reason, or a registry refusal
	TopicID   uint64            `json:"topic,omitempty"`
	RangeIDs  []uint64          `json:"ranges,omitempty"`
	SegmentID uint64            `json:"segment,omitempty"`
	Sealed    *metadata.Segment `json:"sealed,omitempty"`
	Deleted   []uint64          `json:"deleted,omitempty"`
	// Registry is the registry after a registry command (a joining node
	// learns the cluster from it).
	Registry *Registry `json:"registry,omitempty"`
}

func outcomeOf(res metadata.Result) outcome {
	o := outcome{TopicID: res.TopicID, RangeIDs: res.RangeIDs, SegmentID: res.SegmentID, Sealed: res.Sealed, Deleted: res.Deleted}
	if res.Err != nil {
		o.Err = res.Err.Error()
	}
	return o
}

// result turns a metadata outcome back into a metadata.Result.
func (o outcome) result() metadata.Result {
	res := metadata.Result{TopicID: o.TopicID, RangeIDs: o.RangeIDs, SegmentID: o.SegmentID, Sealed: o.Sealed, Deleted: o.Deleted}
	if o.Err != "" {
		res.Err = metadata.Error(o.Err)
	}
	return res
}

func encodeOutcome(o outcome) []byte {
	b, err := json.Marshal(o)
	if err != nil {
		// Only unencodable values fail, and an outcome holds none.
		panic("control: encode outcome: " + err.Error())
	}
	return b
}

var errBadOutcome = errors.New("control: undecodable result from the state machine")

func decodeOutcome(b []byte) (outcome, error) {
	var o outcome
	if err := json.Unmarshal(b, &o); err != nil {
		return outcome{}, errBadOutcome
	}
	return o, nil
}

func encodeEntry(e entry) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("control: encode entry: %w", err)
	}
	return b, nil
}
