package control

import (
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/placement"
)

// Policies live in the root group; a topic's binding lives with the topic
// in its vnode, found by the topic's name like every other topic command.
func TestRoutePolicyCommands(t *testing.T) {
	ring := placement.Ring{Vnodes: 8}
	for _, kind := range []string{metadata.KindDefinePolicy, metadata.KindDeletePolicy} {
		rt := route(&metadata.Command{Kind: kind, Policy: "p"}, ring)
		if rt.refused != nil || rt.group != RootGroup {
			t.Errorf("%s: routed to %d (refused %v), want the root group", kind, rt.group, rt.refused)
		}
		if !rootKinds[kind] {
			t.Errorf("%s is not a root kind: the root group would refuse it", kind)
		}
	}
	for _, topic := range []string{"orders", "clicks", "t-1", "z"} {
		bind := route(&metadata.Command{Kind: metadata.KindBindTopicPolicy, Topic: topic, Policy: "p"}, ring)
		create := route(&metadata.Command{Kind: metadata.KindCreateTopic, Topic: topic}, ring)
		if bind.refused != nil || bind.group != create.group || !isVnodeGroup(bind.group, ring.Count()) {
			t.Errorf("bind %q: group %d (refused %v), want the topic's vnode %d", topic, bind.group, bind.refused, create.group)
		}
	}
	if rootKinds[metadata.KindBindTopicPolicy] {
		t.Error("bind_topic_policy is a root kind: vnodes would refuse it")
	}
}

// The state machines hold each kind to its side: the root applies policy
// definitions and refuses bindings, a vnode the other way round.
func TestPolicyKindsStayOnTheirSide(t *testing.T) {
	root := &groupSM{root: true, st: metadata.NewShard(uint16(RootGroup))}
	vnode := &groupSM{st: metadata.NewShard(uint16(VnodeGroup(0)))}
	define := &metadata.Command{V: metadata.Version, Kind: metadata.KindDefinePolicy, Policy: "p",
		PolicyFields: map[string]metadata.PolicyValue{metadata.FieldMaxAge: {Int: 1000}}}
	if res := root.applyMeta(define); res.Err != nil {
		t.Fatalf("root define_policy: %v", res.Err)
	}
	if res := vnode.applyMeta(define); res.Err != metadata.ErrInvalidCommand {
		t.Fatalf("vnode define_policy: %v, want invalid_command", res.Err)
	}
	create := &metadata.Command{V: metadata.Version, Kind: metadata.KindCreateTopic, Topic: "t"}
	if res := vnode.applyMeta(create); res.Err != nil {
		t.Fatalf("vnode create_topic: %v", res.Err)
	}
	bind := &metadata.Command{V: metadata.Version, Kind: metadata.KindBindTopicPolicy, Topic: "t", Policy: "p"}
	if res := root.applyMeta(bind); res.Err != metadata.ErrInvalidCommand {
		t.Fatalf("root bind_topic_policy: %v, want invalid_command", res.Err)
	}
	if res := vnode.applyMeta(bind); res.Err != nil {
		t.Fatalf("vnode bind_topic_policy: %v", res.Err)
	}
	if got := vnode.st.TopicsBoundTo("p"); len(got) != 1 || got[0] != "t" {
		t.Fatalf("vnode TopicsBoundTo(p) = %v, want [t]", got)
	}
}
