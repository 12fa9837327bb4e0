package client

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// Storage policy field names. A field a policy sets is off (the rule is
// disabled), an integer bound (0 is a real bound) or a string; a field it
// leaves out takes the node's default. See docs/retention.md.
const (
	PolicyMaxAge          = "max_age_ms"         // oldest sealed data kept, in ms
	PolicyMaxBytes        = "max_bytes"          // sealed bytes kept per range
	PolicyMaxRecords      = "max_records"        // sealed records kept per range
	PolicySegmentMaxBytes = "segment_max_bytes"  // size at which a segment rolls, >= 4096
	PolicySegmentMaxAge   = "segment_max_age_ms" // age at which a segment rolls, >= 1000 ms
	PolicyDefaultTTL      = "default_ttl_ms"     // TTL of records that carry none, >= 1 ms
	PolicyReplicas        = "replicas"           // copies of each segment, 1 to 16; never off
	PolicySpreadBy        = "spread_by"          // node attribute replicas spread over; off: no spreading
	PolicyMinDomains      = "min_domains"        // distinct spread_by values, 1 to 16; never off
	PolicyPlacement       = "placement"          // "hard" or "soft"; never off
)

// PolicyValue is one field of a storage policy: off, an integer bound or
// a string. The zero PolicyValue is the bound 0.
type PolicyValue struct {
	off   bool
	isStr bool
	n     int64
	s     string
}

// PolicyOff is a field's rule switched off, whatever the node's default.
func PolicyOff() PolicyValue { return PolicyValue{off: true} }

// PolicyInt is an integer bound; 0 is a bound like any other.
func PolicyInt(n int64) PolicyValue { return PolicyValue{n: n} }

// PolicyDuration is a bound in milliseconds, for the _ms fields; a
// duration that is not a whole number of milliseconds rounds up.
func PolicyDuration(d time.Duration) PolicyValue {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return PolicyInt(int64(ms))
}

// PolicyString is a string value, for spread_by and placement.
func PolicyString(s string) PolicyValue { return PolicyValue{isStr: true, s: s} }

// IsOff reports whether the value switches the field's rule off.
func (v PolicyValue) IsOff() bool { return v.off }

// Int returns the bound, and false when the value is off or a string.
func (v PolicyValue) Int() (int64, bool) { return v.n, !v.off && !v.isStr }

// Str returns the string, and false when the value is off or a bound.
func (v PolicyValue) Str() (string, bool) { return v.s, !v.off && v.isStr }

// String is "off", the bound in decimal, or the string.
func (v PolicyValue) String() string {
	switch {
	case v.off:
		return "off"
	case v.isStr:
		return v.s
	}
	return strconv.FormatInt(v.n, 10)
}

// MarshalJSON writes a bound as a number, a string as a string, and off
// as null.
func (v PolicyValue) MarshalJSON() ([]byte, error) {
	switch {
	case v.off:
		return []byte("null"), nil
	case v.isStr:
		return json.Marshal(v.s)
	}
	return strconv.AppendInt(nil, v.n, 10), nil
}

func (v PolicyValue) toWire() wire.PolicyValue {
	return wire.PolicyValue{Off: v.off, Int: v.n, Str: v.s, IsStr: v.isStr}
}

func policyValueOf(w wire.PolicyValue) PolicyValue {
	return PolicyValue{off: w.Off, isStr: w.IsStr && !w.Off, n: w.Int, s: w.Str}
}

func fieldsOf(fs []wire.PolicyField) map[string]PolicyValue {
	out := make(map[string]PolicyValue, len(fs))
	for _, f := range fs {
		out[f.Name] = policyValueOf(f.Value)
	}
	return out
}

// Policy is a named storage policy.
type Policy struct {
	Name      string
	DefinedAt time.Time
	// Fields holds the fields the policy sets; any other field takes the
	// node's default.
	Fields map[string]PolicyValue
}

// TopicPolicy is a topic's storage policy binding and the settings in
// effect for it.
type TopicPolicy struct {
	Topic string
	// Policy is the name the topic is bound to, "" for none.
	Policy string
	// Resolution is "none" (not bound), "resolved" or "unresolved": bound
	// to a name no policy defines (it was deleted with force), when
	// retention expires nothing on the topic.
	Resolution string
	// Definition is the bound policy's own fields; empty unless resolved.
	Definition map[string]PolicyValue
	// Effective is every field as it applies to the topic, in a fixed
	// order.
	Effective []EffectiveField
}

// EffectiveField is one setting in effect for a topic and where it comes
// from: "policy", "global" (the node's default) or "unresolved".
type EffectiveField struct {
	Name   string
	Value  PolicyValue
	Origin string
}

// DefinePolicy creates the policy name, or replaces its definition, with
// fields (a field left out takes the node's default). A definition the
// broker cannot take fails with ErrInvalidPolicy: an unknown field, a
// value of the wrong kind, a negative or out-of-range bound, or off for
// replicas, min_domains or placement. Admin only.
func (c *Client) DefinePolicy(ctx context.Context, name string, fields map[string]PolicyValue) error {
	req := wire.DefinePolicyRequest{Name: name, Fields: make([]wire.PolicyField, 0, len(fields))}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		req.Fields = append(req.Fields, wire.PolicyField{Name: k, Value: fields[k].toWire()})
	}
	// Defining the same fields twice is harmless: it may be resent.
	return c.do(ctx, request{req: req, resend: true})
}

// DeletePolicy deletes the policy name. While a topic is bound to it, it
// fails with ErrPolicyInUse unless force; with force the bound topics
// keep the name, unresolved, and retention expires nothing on them until
// they are bound again. ErrNoSuchPolicy if none is defined. Admin only.
func (c *Client) DeletePolicy(ctx context.Context, name string, force bool) error {
	return c.do(ctx, request{req: wire.DeletePolicyRequest{Name: name, Force: force}})
}

// ListPolicies returns every policy, sorted by name. Admin only.
func (c *Client) ListPolicies(ctx context.Context) ([]Policy, error) {
	var resp wire.ListPoliciesResponse
	if err := c.do(ctx, request{req: wire.ListPoliciesRequest{}, resp: &resp, resend: true}); err != nil {
		return nil, err
	}
	out := make([]Policy, len(resp.Policies))
	for i, p := range resp.Policies {
		out[i] = Policy{Name: p.Name, DefinedAt: time.UnixMilli(int64(min(p.DefinedAt, 1<<62))), Fields: fieldsOf(p.Fields)}
	}
	return out, nil
}

// BindPolicy binds topic to the policy name, which must be defined
// (ErrNoSuchPolicy). Admin only.
func (c *Client) BindPolicy(ctx context.Context, topic, name string) error {
	return c.do(ctx, request{req: wire.BindTopicPolicyRequest{Topic: topic, Policy: &name}, resend: true})
}

// UnbindPolicy removes topic's policy binding: every field then takes the
// node's default. Admin only.
func (c *Client) UnbindPolicy(ctx context.Context, topic string) error {
	return c.do(ctx, request{req: wire.BindTopicPolicyRequest{Topic: topic}, resend: true})
}

// TopicPolicy returns topic's binding and the settings in effect for it,
// each with its origin. Admin only.
func (c *Client) TopicPolicy(ctx context.Context, topic string) (TopicPolicy, error) {
	var resp wire.GetTopicPolicyResponse
	if err := c.do(ctx, request{req: wire.GetTopicPolicyRequest{Topic: topic}, resp: &resp, resend: true}); err != nil {
		return TopicPolicy{}, err
	}
	tp := TopicPolicy{
		Topic: resp.Topic, Resolution: resp.Resolution, Definition: fieldsOf(resp.Definition),
		Effective: make([]EffectiveField, len(resp.Effective)),
	}
	if resp.Policy != nil {
		tp.Policy = *resp.Policy
	}
	for i, f := range resp.Effective {
		tp.Effective[i] = EffectiveField{Name: f.Name, Value: policyValueOf(f.Value), Origin: f.Origin}
	}
	return tp, nil
}

// WithPolicy binds the new topic to the storage policy name, which must
// be defined (ErrNoSuchPolicy). Binding is an admin's: with it,
// CreateTopic needs the admin permission.
func WithPolicy(name string) TopicOption {
	return func(c *topicConfig) { c.policy = name }
}

// skipFlags is the flags byte of a fetch on cn: ask for skips when the
// node reports them.
func (cn *conn) skipFlags() uint8 {
	if cn.wire.fetchSkips {
		return wire.FlagSkips
	}
	return 0
}

// TTLHeader is the header that carries a record's time to live, in
// decimal milliseconds. The broker turns it into an expiry by its own
// clock when it stores the record.
const TTLHeader = "malachi.ttl_ms"

// RecordOption sets something on a record built by NewRecord.
type RecordOption func(*Record)

// NewRecord is a record of key and value with opts applied.
func NewRecord(key, value []byte, opts ...RecordOption) Record {
	r := Record{Key: key, Value: value}
	for _, o := range opts {
		o(&r)
	}
	return r
}

// WithTTL gives a record a time to live: readers stop seeing it d after
// the broker stored it. d rounds up to whole milliseconds; d <= 0 leaves
// the record without a TTL of its own (the topic's default_ttl_ms, if
// any, applies).
func WithTTL(d time.Duration) RecordOption {
	return func(r *Record) { r.SetTTL(d) }
}

// SetTTL sets the record's time to live as WithTTL does, replacing any it
// had.
func (r *Record) SetTTL(d time.Duration) {
	hs := make([]Header, 0, len(r.Headers)+1)
	for _, h := range r.Headers {
		if h.Key != TTLHeader {
			hs = append(hs, h)
		}
	}
	if d > 0 {
		ms, _ := PolicyDuration(d).Int()
		hs = append(hs, Header{Key: TTLHeader, Value: strconv.AppendInt(nil, ms, 10)})
	}
	if len(hs) == 0 {
		hs = nil
	}
	r.Headers = hs
}
