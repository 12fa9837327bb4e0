package wire

import (
	"errors"
	"testing"
)

// TestEdgeBindTopicPolicyPresentEmptyName: unbinding has one encoding,
// an absent name. A present empty name is malformed, as it is in
// create_topic_ex; accepted, it is a second way to say "unbind" that a
// proposer would pass on as a binding to the name "".
func TestEdgeBindTopicPolicyPresentEmptyName(t *testing.T) {
	empty := ""
	payload := BindTopicPolicyRequest{Topic: "orders", Policy: &empty}.AppendPayload(nil)
	var r BindTopicPolicyRequest
	err := r.Decode(payload)
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("present empty policy name decoded as %+v (policy %q), err %v; want malformed", r, *r.Policy, err)
	}
	// The same rule in create_topic_ex, for comparison.
	topic := "orders"
	ct := append(CreateTopicExRequest{Topic: &topic, Bits: 4, Ranges: 1}.AppendPayload(nil), 0, strPresent, 0, 0, 0, 0)
	if err := new(CreateTopicExRequest).Decode(ct); !errors.Is(err, ErrMalformed) {
		t.Fatalf("create_topic_ex with a present empty policy: %v", err)
	}
}
