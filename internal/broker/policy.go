package broker

import (
	"context"
	"maps"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/retention"
)

// The storage policy operations. The server checks that the caller is an
// admin and records the audit event (policy_defined, policy_deleted,
// topic_policy_bound) with the caller's identity; these are the
// operations themselves.

// DefinePolicy creates or replaces a named storage policy. fields are
// validated (and aliases renamed) before anything is proposed, so a
// malformed definition answers invalid_policy without a round trip.
func (b *Broker) DefinePolicy(ctx context.Context, name string, fields map[string]metadata.PolicyValue) error {
	canon, err := metadata.ValidatePolicy(fields)
	if err != nil {
		return err
	}
	_, err = b.apply(ctx, metadata.Command{Kind: metadata.KindDefinePolicy, Policy: name, PolicyFields: canon})
	return err
}

// DeletePolicy removes a policy. Unless force, it refuses with
// policy_in_use while any topic, in any vnode, is bound to it. In a
// cluster the policies live in the root group, which cannot see topics,
// so the look across the vnodes is made here before proposing; a bind
// racing the delete leaves a topic bound to an undefined name, which
// resolves "unresolved" and expires nothing.
func (b *Broker) DeletePolicy(ctx context.Context, name string, force bool) error {
	if !force && len(b.topicsBoundTo(name)) > 0 {
		return metadata.ErrPolicyInUse
	}
	_, err := b.apply(ctx, metadata.Command{Kind: metadata.KindDeletePolicy, Policy: name, Force: force})
	return err
}

// topicsBoundTo lists the topics of every vnode bound to the policy.
func (b *Broker) topicsBoundTo(name string) []string {
	var out []string
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		out = append(out, st.TopicsBoundTo(name)...)
	})
	return out
}

// ListPolicies returns every policy, sorted by name.
func (b *Broker) ListPolicies() []metadata.Policy {
	var out []metadata.Policy
	_ = b.plane.ViewRoot(func(st *metadata.State) { out = st.Policies() })
	return out
}

// policyDefined reports whether the root holds a policy of that name.
func (b *Broker) policyDefined(name string) bool {
	var ok bool
	_ = b.plane.ViewRoot(func(st *metadata.State) { _, ok = st.Policy(name) })
	return ok
}

// BindTopicPolicy binds a topic to a policy by name; nil unbinds. Binding
// a name no policy defines answers no_such_policy.
func (b *Broker) BindTopicPolicy(ctx context.Context, topic string, name *string) error {
	policy := ""
	if name != nil {
		policy = *name
		if !b.policyDefined(policy) {
			return metadata.ErrNoSuchPolicy
		}
	}
	_, err := b.apply(ctx, metadata.Command{Kind: metadata.KindBindTopicPolicy, Topic: topic, Policy: policy})
	return err
}

// TopicPolicy is a topic's binding and the settings in effect for it.
type TopicPolicy struct {
	Topic string
	// Policy is the bound policy's name, nil when the topic has none.
	Policy *string
	// Resolution is "none", "resolved" or "unresolved" (bound to a name
	// no policy defines: retention then expires nothing).
	Resolution string
	// Definition is the bound policy's own fields; nil when none or
	// unresolved.
	Definition map[string]metadata.PolicyValue
	// Effective is every field, in the fixed order of answers.
	Effective []PolicyField
}

// PolicyField is one effective setting and where it came from: "policy",
// "global" (the node's default) or "unresolved".
type PolicyField struct {
	Name   string
	Value  metadata.PolicyValue
	Origin string
}

// TopicPolicy reports a topic's binding and effective settings.
func (b *Broker) TopicPolicy(topic string) (TopicPolicy, error) {
	var (
		t  metadata.Topic
		ok bool
	)
	_ = b.plane.ViewTopicName(topic, func(st *metadata.State) { t, ok = st.Topic(topic) })
	if !ok {
		return TopicPolicy{}, metadata.ErrNoSuchTopic
	}
	var p *metadata.Policy
	if t.Policy != "" {
		_ = b.plane.ViewRoot(func(st *metadata.State) {
			if pol, found := st.Policy(t.Policy); found {
				p = &pol
			}
		})
	}
	eff := retention.Resolve(b.cfg.retentionDefaults(), t.Policy, p)
	out := TopicPolicy{Topic: t.Name, Resolution: eff.Resolution}
	if t.Policy != "" {
		name := t.Policy
		out.Policy = &name
	}
	if p != nil {
		out.Definition = maps.Clone(p.Fields)
	}
	for _, f := range eff.Ordered() {
		out.Effective = append(out.Effective, PolicyField{Name: f.Name, Value: f.Value(), Origin: f.Origin})
	}
	return out, nil
}

// CreateTopicWithPolicyAs is CreateTopicReplicatedAs that also binds the
// new topic to a policy ("" for none), which must be defined.
func (b *Broker) CreateTopicWithPolicyAs(ctx context.Context, id Identity, name string, bits uint8, ranges, replicas int, policy string) error {
	if policy == "" {
		return b.CreateTopicReplicatedAs(ctx, id, name, bits, ranges, replicas)
	}
	if id.User == "" {
		return ErrPermission // an unaccountable caller gets no share
	}
	if !b.policyDefined(policy) {
		return metadata.ErrNoSuchPolicy
	}
	if err := b.checkCreate(id.User, IsAdmin(id), name, ranges); err != nil {
		return err
	}
	_, err := b.apply(ctx, metadata.Command{Kind: "create_topic", Topic: name, Bits: bits, Ranges: ranges,
		ReplicationFactor: replicas, Policy: policy, Owner: id.User, Quota: b.cfg.Limits.quotaFor(id)})
	return err
}
