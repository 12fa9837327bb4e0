package metadata

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Storage policy field names. A field present in a policy is OFF (the rule
// is disabled), a bound or a string; a field absent inherits the node's
// default, so "unset", "off" and 0 are three different things.
const (
	FieldMaxAge          = "max_age_ms"         // int: oldest sealed data kept
	FieldMaxBytes        = "max_bytes"          // int: sealed bytes kept per range
	FieldMaxRecords      = "max_records"        // int: sealed records kept per range
	FieldSegmentMaxBytes = "segment_max_bytes"  // int >= MinSegmentMaxBytes
	FieldSegmentMaxAge   = "segment_max_age_ms" // int >= MinSegmentMaxAgeMs
	FieldDefaultTTL      = "default_ttl_ms"     // int >= 1
	FieldReplicas        = "replicas"           // int 1..MaxReplicas, never OFF
	FieldMinDomains      = "min_domains"        // int 1..MaxReplicas, never OFF
	FieldSpreadBy        = "spread_by"          // string attribute name; OFF = no spreading
	FieldPlacement       = "placement"          // "hard" or "soft", never OFF
)

// Policy limits.
const (
	MaxPolicies        = 1024 // policies per state
	MaxPolicyFields    = 32   // fields per definition, aliases included
	MaxSpreadByLen     = 64   // bytes of spread_by
	MinSegmentMaxBytes = 4096
	MinSegmentMaxAgeMs = 1000
	// MaxDurationMs bounds every millisecond field (100 years of 365.25
	// days): a longer one means "never" and is refused, since the node
	// computes times in time.Duration, which would overflow.
	MaxDurationMs = 36525 * 24 * 3600 * 1000
)

// PolicyValue is one field of a policy: Off, an Int bound, or a Str (IsStr).
type PolicyValue struct {
	Off   bool   `json:"off,omitempty"`
	Int   int64  `json:"int,omitempty"`
	Str   string `json:"str,omitempty"`
	IsStr bool   `json:"is_str,omitempty"`
}

// Policy is a named set of storage settings that topics bind to by name.
type Policy struct {
	Name      string                 `json:"name"`
	Fields    map[string]PolicyValue `json:"fields"`
	DefinedAt int64                  `json:"defined_at"`
}

func (p Policy) clone() Policy {
	p.Fields = maps.Clone(p.Fields)
	if p.Fields == nil {
		p.Fields = map[string]PolicyValue{}
	}
	return p
}

// fieldRule says what one field accepts.
type fieldRule struct {
	str    bool
	offOK  bool
	min    int64
	max    int64 // 0 = no upper bound
	values []string
}

var fieldRules = map[string]fieldRule{
	FieldMaxAge:          {offOK: true, max: MaxDurationMs},
	FieldMaxBytes:        {offOK: true},
	FieldMaxRecords:      {offOK: true},
	FieldSegmentMaxBytes: {offOK: true, min: MinSegmentMaxBytes},
	FieldSegmentMaxAge:   {offOK: true, min: MinSegmentMaxAgeMs, max: MaxDurationMs},
	FieldDefaultTTL:      {offOK: true, min: 1, max: MaxDurationMs},
	FieldReplicas:        {min: 1, max: MaxReplicas},
	FieldMinDomains:      {min: 1, max: MaxReplicas},
	FieldSpreadBy:        {str: true, offOK: true},
	FieldPlacement:       {str: true, values: []string{"hard", "soft"}},
}

// aliasPrefix names the older spelling of the retention fields
// ("retention.max_age_ms"), accepted on input and stored canonically.
const aliasPrefix = "retention."

var aliased = []string{FieldMaxAge, FieldMaxBytes, FieldMaxRecords, FieldSegmentMaxAge, FieldSegmentMaxBytes}

// canonicalField maps a field name or alias to its canonical name.
func canonicalField(name string) (string, bool) {
	if rest, ok := strings.CutPrefix(name, aliasPrefix); ok {
		return rest, slices.Contains(aliased, rest)
	}
	_, ok := fieldRules[name]
	return name, ok
}

// ValidatePolicy checks a policy's fields and returns them canonical:
// aliases renamed, each value in its one stored form. Any fault (unknown
// name, a name given twice through an alias, a wrong kind, a value out of
// range, OFF where a field needs a value, too many fields) is
// ErrInvalidPolicy.
func ValidatePolicy(fields map[string]PolicyValue) (map[string]PolicyValue, error) {
	if len(fields) > MaxPolicyFields {
		return nil, ErrInvalidPolicy
	}
	out := make(map[string]PolicyValue, len(fields))
	for name, v := range fields {
		canon, ok := canonicalField(name)
		if !ok {
			return nil, ErrInvalidPolicy
		}
		if _, dup := out[canon]; dup {
			return nil, ErrInvalidPolicy
		}
		cv, ok := fieldRules[canon].check(v)
		if !ok {
			return nil, ErrInvalidPolicy
		}
		out[canon] = cv
	}
	return out, nil
}

// check validates one value and returns its canonical form.
func (r fieldRule) check(v PolicyValue) (PolicyValue, bool) {
	if v.Off {
		return PolicyValue{Off: true}, r.offOK && v.Int == 0 && v.Str == "" && !v.IsStr
	}
	if r.str {
		ok := v.IsStr && v.Int == 0 && v.Str != ""
		if r.values != nil {
			ok = ok && slices.Contains(r.values, v.Str)
		} else {
			ok = ok && len(v.Str) <= MaxSpreadByLen && attributeKey(v.Str)
		}
		return PolicyValue{Str: v.Str, IsStr: true}, ok
	}
	ok := !v.IsStr && v.Str == "" && v.Int >= 0 && v.Int >= r.min && (r.max == 0 || v.Int <= r.max)
	return PolicyValue{Int: v.Int}, ok
}

// definePolicy: Policy, PolicyFields. Creates or replaces the policy.
func (s *State) definePolicy(c *Command) Result {
	if !validName(c.Policy) {
		return failed(ErrInvalidPolicy)
	}
	fields, err := ValidatePolicy(c.PolicyFields)
	if err != nil {
		return failed(ErrInvalidPolicy)
	}
	if _, exists := s.policies[c.Policy]; !exists && len(s.policies) >= MaxPolicies {
		return failed(ErrTooManyPolicies)
	}
	s.policies[c.Policy] = &Policy{Name: c.Policy, Fields: fields, DefinedAt: c.Now}
	return Result{}
}

// deletePolicy: Policy, Force. Refuses while a topic of this state is
// bound to it, unless Force: in a cluster the policies live in the root
// group, which holds no topics, so the proposer checks the vnodes first.
func (s *State) deletePolicy(c *Command) Result {
	if _, ok := s.policies[c.Policy]; !ok {
		return failed(ErrNoSuchPolicy)
	}
	if !c.Force && len(s.TopicsBoundTo(c.Policy)) > 0 {
		return failed(ErrPolicyInUse)
	}
	delete(s.policies, c.Policy)
	return Result{}
}

// bindTopicPolicy: Topic, Policy ("" unbinds). The policy need not exist
// here: policies live in the root group, topics in the vnodes. A topic
// bound to an undefined name expires nothing.
func (s *State) bindTopicPolicy(c *Command) Result {
	if c.Policy != "" && !validName(c.Policy) {
		return failed(ErrInvalidPolicy)
	}
	tr, ok := s.byName[c.Topic]
	if !ok {
		return failed(ErrNoSuchTopic)
	}
	tr.t.Policy = c.Policy
	return Result{TopicID: tr.t.ID}
}

// Policies returns every policy sorted by name.
func (s *State) Policies() []Policy {
	out := make([]Policy, 0, len(s.policies))
	for _, p := range s.policies {
		out = append(out, p.clone())
	}
	slices.SortFunc(out, func(a, b Policy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Policy looks a policy up by name.
func (s *State) Policy(name string) (Policy, bool) {
	p, ok := s.policies[name]
	if !ok {
		return Policy{}, false
	}
	return p.clone(), true
}

// TopicsBoundTo returns the names of this state's topics bound to the
// policy, sorted.
func (s *State) TopicsBoundTo(name string) []string {
	var out []string
	for _, tr := range s.topics {
		if tr.t.Policy == name && name != "" {
			out = append(out, tr.t.Name)
		}
	}
	slices.Sort(out)
	return out
}

// checkPolicies: every policy is valid and canonical, under the cap.
func (s *State) checkPolicies() error {
	if len(s.policies) > MaxPolicies {
		return fmt.Errorf("%d policies, at most %d", len(s.policies), MaxPolicies)
	}
	for name, p := range s.policies {
		fields, err := ValidatePolicy(p.Fields)
		if name != p.Name || !validName(name) || err != nil || !maps.Equal(fields, p.Fields) {
			return fmt.Errorf("policy %q: bad name or fields", name)
		}
	}
	return nil
}

// attributeKey reports whether s can name a node attribute: membership
// accepts keys of [a-z0-9_.-] starting with a letter, so a spread_by any
// other way could never be met by any node.
func attributeKey(s string) bool {
	for i, c := range []byte(s) {
		letter := c >= 'a' && c <= 'z'
		if i == 0 && !letter || !letter && !(c >= '0' && c <= '9') && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return s != ""
}
