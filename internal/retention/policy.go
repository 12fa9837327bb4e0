package retention

import "github.com/malachi-log/malachi/internal/metadata"

// Field names: metadata's canonical ones, here so callers of this
// package need not import both.
const (
	FieldMaxAge          = metadata.FieldMaxAge
	FieldMaxBytes        = metadata.FieldMaxBytes
	FieldMaxRecords      = metadata.FieldMaxRecords
	FieldSegmentMaxBytes = metadata.FieldSegmentMaxBytes
	FieldSegmentMaxAge   = metadata.FieldSegmentMaxAge
	FieldDefaultTTL      = metadata.FieldDefaultTTL
	FieldReplicas        = metadata.FieldReplicas
	FieldMinDomains      = metadata.FieldMinDomains
	FieldSpreadBy        = metadata.FieldSpreadBy
	FieldPlacement       = metadata.FieldPlacement
)

// Resolutions of a topic's binding.
const (
	ResolutionNone       = "none"       // the topic is bound to no policy
	ResolutionResolved   = "resolved"   // bound to a defined policy
	ResolutionUnresolved = "unresolved" // bound to a name no policy defines
)

// Origins of an effective field.
const (
	OriginGlobal     = "global"
	OriginPolicy     = "policy"
	OriginUnresolved = "unresolved"
)

// fieldOrder is every field, in the fixed order get_topic_policy lists
// them.
var fieldOrder = []string{
	FieldMaxAge, FieldMaxBytes, FieldMaxRecords, FieldSegmentMaxBytes, FieldSegmentMaxAge,
	FieldDefaultTTL, FieldReplicas, FieldMinDomains, FieldSpreadBy, FieldPlacement,
}

// retentionFields are the fields an unresolved binding turns off.
var retentionFields = []string{FieldMaxAge, FieldMaxBytes, FieldMaxRecords}

// FieldNames returns every field name in the fixed order of answers.
func FieldNames() []string { return append([]string(nil), fieldOrder...) }

// Defaults are the node's value for each field, used where a topic's
// policy does not set one. A field missing from the map is off; the
// broker fills every field from its configuration.
type Defaults map[string]metadata.PolicyValue

// Field is one effective setting: off, an integer bound (0 is a real
// bound), or a string, and where it came from.
type Field struct {
	Off    bool
	Int    int64
	Str    string
	IsStr  bool
	Origin string
}

// Bound returns the integer bound and true, or false when the field is
// off or a string.
func (f Field) Bound() (int64, bool) {
	if f.Off || f.IsStr {
		return 0, false
	}
	return f.Int, true
}

// Text returns the string value and true, or false when the field is off
// or an integer.
func (f Field) Text() (string, bool) {
	if f.Off || !f.IsStr {
		return "", false
	}
	return f.Str, true
}

// Value returns the field without its origin, in metadata's form.
func (f Field) Value() metadata.PolicyValue {
	return metadata.PolicyValue{Off: f.Off, Int: f.Int, Str: f.Str, IsStr: f.IsStr}
}

func fieldOf(v metadata.PolicyValue, origin string) Field {
	if v.Off {
		return Field{Off: true, Origin: origin}
	}
	return Field{Int: v.Int, Str: v.Str, IsStr: v.IsStr, Origin: origin}
}

// Effective is a topic's resolved settings: every field of fieldOrder,
// and how the binding resolved.
type Effective struct {
	Fields     map[string]Field
	Resolution string
}

// Resolve merges the policy a topic is bound to over the node's defaults.
// bound is the topic's policy name ("" for none) and p the policy of that
// name, nil when none is defined.
func Resolve(def Defaults, bound string, p *metadata.Policy) Effective {
	eff := Effective{Fields: make(map[string]Field, len(fieldOrder)), Resolution: ResolutionNone}
	for _, name := range fieldOrder {
		v, ok := def[name]
		if !ok {
			v = metadata.PolicyValue{Off: true}
		}
		eff.Fields[name] = fieldOf(v, OriginGlobal)
	}
	switch {
	case bound == "":
	case p == nil:
		eff.Resolution = ResolutionUnresolved
		for _, name := range retentionFields {
			eff.Fields[name] = Field{Off: true, Origin: OriginUnresolved}
		}
	default:
		eff.Resolution = ResolutionResolved
		for _, name := range fieldOrder {
			if v, ok := p.Fields[name]; ok {
				eff.Fields[name] = fieldOf(v, OriginPolicy)
			}
		}
	}
	return eff
}

// Field returns the named field; an unknown name is off, with no origin.
func (e Effective) Field(name string) Field {
	if f, ok := e.Fields[name]; ok {
		return f
	}
	return Field{Off: true}
}

// Ordered returns the fields in the fixed order of answers, with names.
func (e Effective) Ordered() []NamedField {
	out := make([]NamedField, 0, len(fieldOrder))
	for _, name := range fieldOrder {
		out = append(out, NamedField{Name: name, Field: e.Field(name)})
	}
	return out
}

// NamedField is a field and its name.
type NamedField struct {
	Name string
	Field
}

// MaxAgeMs is how long after its seal a segment is kept, in ms.
func (e Effective) MaxAgeMs() (int64, bool) { return e.Field(FieldMaxAge).Bound() }

// MaxBytes bounds the sealed bytes of each range.
func (e Effective) MaxBytes() (int64, bool) { return e.Field(FieldMaxBytes).Bound() }

// MaxRecords bounds the sealed records of each range.
func (e Effective) MaxRecords() (int64, bool) { return e.Field(FieldMaxRecords).Bound() }

// SegmentMaxBytes is the size at which the active segment rolls.
func (e Effective) SegmentMaxBytes() (int64, bool) { return e.Field(FieldSegmentMaxBytes).Bound() }

// SegmentMaxAgeMs is the age at which the active segment rolls, in ms.
func (e Effective) SegmentMaxAgeMs() (int64, bool) { return e.Field(FieldSegmentMaxAge).Bound() }

// DefaultTTLMs is the TTL of a record that carries none, in ms.
func (e Effective) DefaultTTLMs() (int64, bool) { return e.Field(FieldDefaultTTL).Bound() }

// Replicas is the topic's replication factor.
func (e Effective) Replicas() (int64, bool) { return e.Field(FieldReplicas).Bound() }

// MinDomains is how many failure domains a segment's replicas must span.
func (e Effective) MinDomains() (int64, bool) { return e.Field(FieldMinDomains).Bound() }

// SpreadBy is the node attribute replicas spread over; off means none.
func (e Effective) SpreadBy() (string, bool) { return e.Field(FieldSpreadBy).Text() }

// Placement is "hard" or "soft".
func (e Effective) Placement() (string, bool) { return e.Field(FieldPlacement).Text() }
