package server

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/wire"
)

// Storage policies, keys 17–21. All are admin-only: handle checks the
// admin permission (auditing a refusal) before any of these run.

// Audit event types of the policy keys.
const (
	auditPolicyDefined    = "policy_defined"
	auditPolicyDeleted    = "policy_deleted"
	auditTopicPolicyBound = "topic_policy_bound"
)

// policyAdmin runs a policy request; handled is false for any other
// request.
func (c *conn) policyAdmin(id broker.Identity, req wire.Request) (resp wire.Response, handled bool, err error) {
	switch r := req.(type) {
	case *wire.ListPoliciesRequest:
		return listPolicies(c.s.b.ListPolicies()), true, nil
	case *wire.GetTopicPolicyRequest:
		tp, err := c.s.b.TopicPolicy(r.Topic)
		if err != nil {
			return nil, true, err
		}
		return topicPolicy(tp), true, nil
	case *wire.DefinePolicyRequest:
		return nil, true, c.definePolicy(id, r)
	case *wire.DeletePolicyRequest:
		err := c.s.b.DeletePolicy(c.reqCtx, r.Name, r.Force)
		c.audit(id, auditPolicyDeleted, r.Name, map[string]string{"force": fmt.Sprint(r.Force)}, err)
		return nil, true, err
	case *wire.BindTopicPolicyRequest:
		err := c.s.b.BindTopicPolicy(c.reqCtx, r.Topic, r.Policy)
		c.audit(id, auditTopicPolicyBound, r.Topic, map[string]string{"policy": deref(r.Policy)}, err)
		return nil, true, err
	}
	return nil, false, nil
}

func (c *conn) definePolicy(id broker.Identity, r *wire.DefinePolicyRequest) error {
	fields, err := fromWireFields(r.Fields)
	if err == nil {
		err = c.s.b.DefinePolicy(c.reqCtx, r.Name, fields)
	}
	c.audit(id, auditPolicyDefined, r.Name, map[string]string{"fields": fieldNames(r.Fields)}, err)
	return err
}

// fromWireFields turns a request's field list into a definition. A name
// given twice is refused here: a map would keep only one of them, and
// which one the client meant is anyone's guess.
func fromWireFields(fs []wire.PolicyField) (map[string]metadata.PolicyValue, error) {
	out := make(map[string]metadata.PolicyValue, len(fs))
	for _, f := range fs {
		if _, dup := out[f.Name]; dup {
			return nil, metadata.ErrInvalidPolicy
		}
		out[f.Name] = metadata.PolicyValue{Off: f.Value.Off, Int: f.Value.Int, Str: f.Value.Str, IsStr: f.Value.IsStr}
	}
	return out, nil
}

// fieldNames lists a definition's field names for the audit log; the
// values are in the metadata, and a string value is not the log's to keep.
func fieldNames(fs []wire.PolicyField) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.Name
	}
	return strings.Join(names, ",")
}

func toWireValue(v metadata.PolicyValue) wire.PolicyValue {
	return wire.PolicyValue{Off: v.Off, Int: v.Int, Str: v.Str, IsStr: v.IsStr}
}

// toWireFields lists a definition sorted by name, so an answer has one
// encoding.
func toWireFields(m map[string]metadata.PolicyValue) []wire.PolicyField {
	if len(m) == 0 {
		return nil
	}
	out := make([]wire.PolicyField, 0, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		out = append(out, wire.PolicyField{Name: name, Value: toWireValue(m[name])})
	}
	return out
}

func listPolicies(ps []metadata.Policy) *wire.ListPoliciesResponse {
	resp := &wire.ListPoliciesResponse{Policies: make([]wire.PolicyInfo, 0, len(ps))}
	for _, p := range ps {
		resp.Policies = append(resp.Policies, wire.PolicyInfo{
			Name: p.Name, DefinedAt: uint64(max(p.DefinedAt, 0)), Fields: toWireFields(p.Fields),
		})
	}
	return resp
}

func topicPolicy(tp broker.TopicPolicy) *wire.GetTopicPolicyResponse {
	resp := &wire.GetTopicPolicyResponse{
		Topic: tp.Topic, Policy: tp.Policy, Resolution: tp.Resolution, Definition: toWireFields(tp.Definition),
		Effective: make([]wire.EffectiveField, len(tp.Effective)),
	}
	for i, f := range tp.Effective {
		resp.Effective[i] = wire.EffectiveField{Name: f.Name, Value: toWireValue(f.Value), Origin: f.Origin}
	}
	return resp
}
