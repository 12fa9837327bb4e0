package wire

import "encoding/binary"

// Storage policies, keys 17–21, numbered as the original protocol numbers
// them; all are admin-only. A policy is a name and a list of fields, each
// off, an integer bound or a string; a field a policy leaves out inherits
// the node's default. The decoders check only the shape and the bounds
// below; which names and values a policy may hold is the metadata's rule
// (invalid_policy). Layouts in docs/wire.md.
//
//	fields = count:u16 (str(name) value)*
//	value  = 0x00                   off
//	       | 0x01 int:i64           a bound (big-endian, two's complement)
//	       | 0x02 len:u32 bytes     a string

// Bounds on a policy as it travels; a payload past one is malformed.
const (
	MaxPolicyFields    = 32   // fields in one list
	MaxPolicyNameLen   = 255  // bytes of a policy, field or origin name
	MaxPolicyStringLen = 1024 // bytes of a string value
)

// Tags of a policy value.
const (
	policyOff = 0x00
	policyInt = 0x01
	policyStr = 0x02
)

// Smallest encodings: a field is an empty name and an off value; a
// policy in a list is an empty name, defined_at and no fields.
const (
	minPolicyFieldLen = minPresent + 1
	minPolicyInfoLen  = minPresent + 8 + 2
)

// newPolicyRequest returns a zero request of key's type, or nil.
func newPolicyRequest(key uint16) requestDecoder {
	switch key {
	case KeyDefinePolicy:
		return new(DefinePolicyRequest)
	case KeyDeletePolicy:
		return new(DeletePolicyRequest)
	case KeyListPolicies:
		return new(ListPoliciesRequest)
	case KeyBindTopicPolicy:
		return new(BindTopicPolicyRequest)
	case KeyGetTopicPolicy:
		return new(GetTopicPolicyRequest)
	}
	return newAdminRequest(key)
}

// PolicyValue is one field's value: Off, or an Int bound, or a Str
// (IsStr). Off wins over the others when encoding, then IsStr; a decoded
// value has only the members its tag carries.
type PolicyValue struct {
	Off   bool
	Int   int64
	Str   string
	IsStr bool
}

// PolicyField is a named value, in a definition or a request.
type PolicyField struct {
	Name  string
	Value PolicyValue
}

func appendPolicyValue(dst []byte, v PolicyValue) []byte {
	switch {
	case v.Off:
		return append(dst, policyOff)
	case v.IsStr:
		dst = appendU32(append(dst, policyStr), uint32(len(v.Str)))
		return append(dst, v.Str...)
	default:
		return appendU64(append(dst, policyInt), uint64(v.Int))
	}
}

func (d *decoder) policyValue() PolicyValue {
	switch tag := d.u8(); tag {
	case policyOff:
		if d.err != nil {
			return PolicyValue{}
		}
		return PolicyValue{Off: true}
	case policyInt:
		return PolicyValue{Int: int64(d.u64())}
	case policyStr:
		n := d.u32()
		if d.err == nil && n > MaxPolicyStringLen {
			d.fail("policy string of %d bytes, more than %d", n, MaxPolicyStringLen)
		}
		b := d.take(uint64(n), "policy string")
		return PolicyValue{Str: string(b), IsStr: true}
	default:
		d.fail("policy value tag 0x%02x", tag)
		return PolicyValue{}
	}
}

// name reads a present str of at most MaxPolicyNameLen bytes.
func (d *decoder) name(what string) string {
	if len(d.b) >= minPresent && d.b[0] == strPresent {
		if n := binary.BigEndian.Uint32(d.b[1:minPresent]); n > MaxPolicyNameLen {
			d.fail("%s of %d bytes, more than %d", what, n, MaxPolicyNameLen)
			return ""
		}
	}
	return d.str()
}

func appendPolicyFields(dst []byte, fs []PolicyField) []byte {
	dst = appendU16(dst, uint16(len(fs)))
	for _, f := range fs {
		dst = appendPolicyValue(appendString(dst, f.Name), f.Value)
	}
	return dst
}

// fieldCount reads a u16 count of at most MaxPolicyFields items, each at
// least minItem bytes.
func (d *decoder) fieldCount(minItem int) int {
	n := int(d.u16())
	switch {
	case d.err != nil:
		return 0
	case n > MaxPolicyFields:
		d.fail("%d policy fields, more than %d", n, MaxPolicyFields)
		return 0
	case n*minItem > len(d.b):
		d.fail("policy field count %d cannot fit in %d bytes", n, len(d.b))
		return 0
	}
	return n
}

// policyFields reads a field list; an empty one decodes as nil.
func (d *decoder) policyFields() []PolicyField {
	n := d.fieldCount(minPolicyFieldLen)
	if n == 0 {
		return nil
	}
	out := make([]PolicyField, 0, n)
	for range n {
		f := PolicyField{Name: d.name("field name"), Value: d.policyValue()}
		if d.err != nil {
			return nil
		}
		out = append(out, f)
	}
	return out
}

// DefinePolicyRequest (key 17): str(name) fields. Creates the policy or
// replaces its definition; the answer is empty.
type DefinePolicyRequest struct {
	Name   string
	Fields []PolicyField
}

func (DefinePolicyRequest) APIKey() uint16 { return KeyDefinePolicy }

func (r DefinePolicyRequest) AppendPayload(dst []byte) []byte {
	return appendPolicyFields(appendString(dst, r.Name), r.Fields)
}

func (r *DefinePolicyRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = DefinePolicyRequest{Name: d.name("policy name")}
	r.Fields = d.policyFields()
	return d.finish("define_policy")
}

// DeletePolicyRequest (key 18): str(name) force:bool. Without Force a
// policy still bound to a topic is refused with policy_in_use; the answer
// is empty.
type DeletePolicyRequest struct {
	Name  string
	Force bool
}

func (DeletePolicyRequest) APIKey() uint16 { return KeyDeletePolicy }

func (r DeletePolicyRequest) AppendPayload(dst []byte) []byte {
	return appendBool(appendString(dst, r.Name), r.Force)
}

func (r *DeletePolicyRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = DeletePolicyRequest{Name: d.name("policy name"), Force: d.boolean()}
	return d.finish("delete_policy")
}

// ListPoliciesRequest (key 19) has an empty payload;
// ListPoliciesResponse answers.
type ListPoliciesRequest struct{}

func (ListPoliciesRequest) APIKey() uint16                  { return KeyListPolicies }
func (ListPoliciesRequest) AppendPayload(dst []byte) []byte { return dst }
func (*ListPoliciesRequest) Decode(payload []byte) error {
	return decodeEmpty(payload, "list_policies")
}

// PolicyInfo is one defined policy: str(name) defined_at:u64 fields.
type PolicyInfo struct {
	Name      string
	DefinedAt uint64
	Fields    []PolicyField
}

// ListPoliciesResponse answers list_policies (19): count:u32
// (str(name) defined_at:u64 fields)*, sorted by name.
type ListPoliciesResponse struct{ Policies []PolicyInfo }

func (r ListPoliciesResponse) AppendPayload(dst []byte) []byte {
	dst = appendU32(dst, uint32(len(r.Policies)))
	for _, p := range r.Policies {
		dst = appendPolicyFields(appendU64(appendString(dst, p.Name), p.DefinedAt), p.Fields)
	}
	return dst
}

func (r *ListPoliciesResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ListPoliciesResponse{Policies: list(&d, minPolicyInfoLen, func() PolicyInfo {
		return PolicyInfo{Name: d.name("policy name"), DefinedAt: d.u64(), Fields: d.policyFields()}
	})}
	return d.finish("list_policies response")
}

// BindTopicPolicyRequest (key 20): str(topic) nstr(policy). A nil Policy
// unbinds the topic, which then takes the node's defaults; the answer is
// empty.
type BindTopicPolicyRequest struct {
	Topic  string
	Policy *string
}

func (BindTopicPolicyRequest) APIKey() uint16 { return KeyBindTopicPolicy }

func (r BindTopicPolicyRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendString(dst, r.Topic), r.Policy)
}

func (r *BindTopicPolicyRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = BindTopicPolicyRequest{Topic: d.str()}
	if len(d.b) > 0 && d.b[0] == strAbsent {
		d.take(1, "absent policy")
	} else if name := d.name("policy name"); name != "" {
		r.Policy = &name
	} else {
		d.fail("an empty policy name (send it absent to unbind)")
	}
	return d.finish("bind_topic_policy")
}

// GetTopicPolicyRequest (key 21): str(topic); GetTopicPolicyResponse
// answers.
type GetTopicPolicyRequest struct{ Topic string }

func (GetTopicPolicyRequest) APIKey() uint16 { return KeyGetTopicPolicy }

func (r GetTopicPolicyRequest) AppendPayload(dst []byte) []byte { return appendString(dst, r.Topic) }

func (r *GetTopicPolicyRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = GetTopicPolicyRequest{Topic: d.str()}
	return d.finish("get_topic_policy")
}

// EffectiveField is one of a topic's effective settings and where it
// came from: "global" (the node's default), "policy" or "unresolved".
type EffectiveField struct {
	Name   string
	Value  PolicyValue
	Origin string
}

const minEffectiveFieldLen = minPresent + 1 + minPresent

// GetTopicPolicyResponse answers get_topic_policy (21): str(topic)
// nstr(policy) str(resolution) fields(definition)
// count:u16 (str(name) value str(origin))*. Policy is the bound name (nil
// when none); Resolution is "none", "resolved" or "unresolved" (bound to
// a name no policy defines); Definition is the bound policy's fields
// (none unless resolved); Effective lists every field in a fixed order.
type GetTopicPolicyResponse struct {
	Topic      string
	Policy     *string
	Resolution string
	Definition []PolicyField
	Effective  []EffectiveField
}

func (r GetTopicPolicyResponse) AppendPayload(dst []byte) []byte {
	dst = appendString(appendNStr(appendString(dst, r.Topic), r.Policy), r.Resolution)
	dst = appendU16(appendPolicyFields(dst, r.Definition), uint16(len(r.Effective)))
	for _, f := range r.Effective {
		dst = appendString(appendPolicyValue(appendString(dst, f.Name), f.Value), f.Origin)
	}
	return dst
}

func (r *GetTopicPolicyResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = GetTopicPolicyResponse{Topic: d.str(), Policy: d.nstr(), Resolution: d.name("resolution"), Definition: d.policyFields()}
	if n := d.fieldCount(minEffectiveFieldLen); n > 0 {
		r.Effective = make([]EffectiveField, 0, n)
		for range n {
			f := EffectiveField{Name: d.name("field name"), Value: d.policyValue(), Origin: d.name("origin")}
			if d.err != nil {
				r.Effective = nil
				break
			}
			r.Effective = append(r.Effective, f)
		}
	}
	return d.finish("get_topic_policy response")
}

// FlagSkips, in the optional flags byte of fetch_batches (82),
// subscribe_batches (83) and describe_group (70), asks the answer to
// report skips: records retention deleted before the reader read them.
const FlagSkips uint8 = 1 << 0

// knownFlags are the flag bits this version understands, per key: the
// bits of one key mean nothing to another, so a bit added for one key is
// not silently taken by the others. Any other bit is malformed, so a
// client learns at once that the node does not know it; a key not listed
// takes no flags.
var knownFlags = map[uint16]uint8{
	KeyDescribeGroup:    FlagSkips,
	KeyFetchBatches:     FlagSkips,
	KeySubscribeBatches: FlagSkips,
	KeyDescribeTopic:    FlagCopies | FlagPaged | FlagActiveOnly,
	KeyClusterStatus:    FlagRepair,
}

// flags reads key's optional trailing flags byte: 0 when absent. A
// present byte must set only bits known for key, and at least one, so
// that every request has one encoding.
func (d *decoder) flags(key uint16) uint8 {
	if len(d.b) == 0 {
		return 0
	}
	f := d.u8()
	switch unknown := f &^ knownFlags[key]; {
	case f == 0:
		d.fail("flags present and zero")
	case unknown != 0:
		d.fail("unknown flag bits 0x%02x for %s", unknown, KeyName(key))
	}
	return f
}

func appendFlags(dst []byte, f uint8) []byte {
	if f == 0 {
		return dst
	}
	return appendU8(dst, f)
}

// Skips is the skip report that ends an answer when the request set
// FlagSkips: skipped:u64 bound:bool. Count is the records the reader's
// position passed because retention had deleted them; Bound means Count
// is an upper bound (a slice of an ancestor range, or an old count merged
// away). Asked says the fields are on the wire; without it they are not,
// and the answer is byte for byte the older layout.
type Skips struct {
	Asked bool
	Count uint64
	Bound bool
}

func (s Skips) appendTo(dst []byte) []byte {
	if !s.Asked {
		return dst
	}
	return appendBool(appendU64(dst, s.Count), s.Bound)
}

// skips reads the optional skip report: present exactly when bytes
// remain.
func (d *decoder) skips() Skips {
	if len(d.b) == 0 {
		return Skips{}
	}
	return Skips{Asked: true, Count: d.u64(), Bound: d.boolean()}
}

// skipsSize is the encoded size of a skip report that was asked for.
const skipsSize = 8 + 1
