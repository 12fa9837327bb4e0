// Storage policy keys and the optional trailing fields of version 2:
// bounds on fields, names and strings; strict tags and flags; the older
// layouts decoding exactly as before; and the versions advertised.
package wire

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func u16(v uint16) []byte { return []byte{byte(v >> 8), byte(v)} }

// offField is a field named name with an off value.
func offField(name string) []byte { return payload(str(name), oneByte(policyOff)) }

func repeatField(n int) []byte {
	var out []byte
	for range n {
		out = append(out, offField("f")...)
	}
	return out
}

func TestPolicyBounds(t *testing.T) {
	long := strings.Repeat("n", MaxPolicyNameLen)
	longer := long + "n"
	value := strings.Repeat("v", MaxPolicyStringLen)
	strValue := func(s string) []byte { return payload(oneByte(policyStr), be32(uint32(len(s))), []byte(s)) }
	cases := []struct {
		name    string
		payload []byte
		ok      bool
	}{
		{"32 fields", payload(str("p"), u16(32), repeatField(32)), true},
		{"33 fields", payload(str("p"), u16(33), repeatField(33)), false},
		{"field count 65535", payload(str("p"), u16(0xFFFF), repeatField(40)), false},
		{"field count past the bytes", payload(str("p"), u16(3), repeatField(2)), false},
		{"policy name of 255 bytes", payload(str(long), u16(0)), true},
		{"policy name of 256 bytes", payload(str(longer), u16(0)), false},
		{"field name of 256 bytes", payload(str("p"), u16(1), offField(longer)), false},
		{"absent policy name", payload(absent(), u16(0)), false},
		{"absent field name", payload(str("p"), u16(1), absent(), oneByte(policyOff)), false},
		{"string value of 1 KiB", payload(str("p"), u16(1), str("spread_by"), strValue(value)), true},
		{"string value past 1 KiB", payload(str("p"), u16(1), str("spread_by"), strValue(value+"v")), false},
		{"string length 2^32-1", payload(str("p"), u16(1), str("spread_by"), oneByte(policyStr), lots(0xFFFFFFFF), zeros(10)), false},
		{"value tag 3", payload(str("p"), u16(1), str("f"), oneByte(3)), false},
		{"int cut short", payload(str("p"), u16(1), str("f"), oneByte(policyInt), zeros(7)), false},
		{"negative int is shape-valid", payload(str("p"), u16(1), str("f"), oneByte(policyInt), be64(math.MaxUint64)), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeRequest(KeyDefinePolicy, c.payload)
			if c.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !c.ok && !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want malformed", err)
			}
		})
	}
}

func TestPolicyValueKindsDecode(t *testing.T) {
	p := payload(str("p"), u16(3),
		str("a"), oneByte(policyOff),
		str("b"), oneByte(policyInt), be64(0),
		str("c"), oneByte(policyStr), be32(0))
	got, err := DecodeRequest(KeyDefinePolicy, p)
	if err != nil {
		t.Fatal(err)
	}
	fs := got.(*DefinePolicyRequest).Fields
	want := []PolicyValue{{Off: true}, {Int: 0}, {IsStr: true}}
	for i, w := range want {
		if fs[i].Value != w {
			t.Errorf("field %s: %+v, want %+v", fs[i].Name, fs[i].Value, w)
		}
	}
	// Off and 0 are different bytes on the wire.
	if bytes.Equal(appendPolicyValue(nil, PolicyValue{Off: true}), appendPolicyValue(nil, PolicyValue{})) {
		t.Fatal("off and 0 encode alike")
	}
}

func TestDeletePolicyForceIsABool(t *testing.T) {
	if _, err := DecodeRequest(KeyDeletePolicy, payload(str("p"), oneByte(2))); !errors.Is(err, ErrMalformed) {
		t.Fatalf("force byte 2: %v", err)
	}
}

func TestBindTopicPolicyNames(t *testing.T) {
	if _, err := DecodeRequest(KeyBindTopicPolicy, payload(str("orders"), str(strings.Repeat("n", 256)))); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a 256-byte policy name: %v", err)
	}
	if _, err := DecodeRequest(KeyBindTopicPolicy, payload(absent(), absent())); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an absent topic: %v", err)
	}
	got, err := DecodeRequest(KeyBindTopicPolicy, payload(str("orders"), absent()))
	if err != nil || got.(*BindTopicPolicyRequest).Policy != nil {
		t.Fatalf("unbind decoded %+v, %v", got, err)
	}
}

func TestGetTopicPolicyResponseBounds(t *testing.T) {
	head := payload(str("orders"), absent(), str("none"), u16(0))
	eff := payload(str("max_age_ms"), oneByte(policyOff), str("global"))
	var r GetTopicPolicyResponse
	if err := r.Decode(payload(head, u16(1), eff)); err != nil || len(r.Effective) != 1 {
		t.Fatalf("one effective field: %+v, %v", r, err)
	}
	if err := r.Decode(payload(head, u16(33), bytes.Repeat(eff, 33))); !errors.Is(err, ErrMalformed) {
		t.Fatalf("33 effective fields: %v", err)
	}
	if err := r.Decode(payload(head, u16(1), str("max_age_ms"), oneByte(policyOff), absent())); !errors.Is(err, ErrMalformed) {
		t.Fatalf("absent origin: %v", err)
	}
}

// Each optional trailing field: absent is the old layout, present decodes,
// a present but zero or unknown flags byte is malformed, and a skip report
// cut short is malformed.
func TestOptionalFlags(t *testing.T) {
	for _, r := range []Request{
		&FetchBatchesRequest{Topic: new("t")},
		&SubscribeBatchesRequest{Topic: new("t")},
		&DescribeGroupRequest{Topic: new("t"), Group: new("g")},
	} {
		old := r.AppendPayload(nil)
		name := KeyName(r.APIKey())
		got, err := DecodeRequest(r.APIKey(), old)
		if err != nil || flagsOf(got) != 0 {
			t.Fatalf("%s without flags: %+v, %v", name, got, err)
		}
		got, err = DecodeRequest(r.APIKey(), append(bytes.Clone(old), FlagSkips))
		if err != nil || flagsOf(got) != FlagSkips {
			t.Fatalf("%s with FlagSkips: %+v, %v", name, got, err)
		}
		for _, bad := range []byte{0, 2, 0x80, 0xFF} {
			if _, err := DecodeRequest(r.APIKey(), append(bytes.Clone(old), bad)); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s with flags 0x%02x: %v, want malformed", name, bad, err)
			}
		}
		if _, err := DecodeRequest(r.APIKey(), append(bytes.Clone(old), FlagSkips, 0)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s with a byte after the flags: %v", name, err)
		}
	}
}

func flagsOf(r Request) uint8 {
	switch r := r.(type) {
	case *FetchBatchesRequest:
		return r.Flags
	case *SubscribeBatchesRequest:
		return r.Flags
	case *DescribeGroupRequest:
		return r.Flags
	}
	return 0xFF
}

func TestWantsSkips(t *testing.T) {
	if (FetchBatchesRequest{}).WantsSkips() || !(FetchBatchesRequest{Flags: FlagSkips}).WantsSkips() {
		t.Error("fetch_batches")
	}
	if (SubscribeBatchesRequest{}).WantsSkips() || !(SubscribeBatchesRequest{Flags: FlagSkips}).WantsSkips() {
		t.Error("subscribe_batches")
	}
	if (DescribeGroupRequest{}).WantsSkips() || !(DescribeGroupRequest{Flags: FlagSkips}).WantsSkips() {
		t.Error("describe_group")
	}
}

func TestSkipReportCutShort(t *testing.T) {
	for _, r := range extendedResponses() {
		full := r.AppendPayload(nil)
		for cut := 1; cut < skipsSize; cut++ {
			if err := fresh(r).Decode(full[:len(full)-cut]); !errors.Is(err, ErrMalformed) {
				t.Errorf("%T with %d bytes of its skip report missing: %v", r, cut, err)
			}
		}
		if err := fresh(r).Decode(full[:len(full)-skipsSize]); err != nil {
			t.Errorf("%T without its skip report: %v", r, err)
		}
		bad := bytes.Clone(full)
		bad[len(bad)-1] = 2
		if err := fresh(r).Decode(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%T with bound byte 2: %v", r, err)
		}
		if err := fresh(r).Decode(append(full, 0)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%T with a byte after the skip report: %v", r, err)
		}
	}
}

func TestFetchBatchesResponseSizeWithSkips(t *testing.T) {
	for _, r := range append(extendedResponses(), sampleResponses()...) {
		if f, ok := r.(*FetchBatchesResponse); ok {
			if got, want := f.Size(), len(f.AppendPayload(nil)); got != want {
				t.Errorf("Size %d, encoded %d bytes (skips %+v)", got, want, f.Skips)
			}
		}
	}
}

func TestCreateTopicExPolicy(t *testing.T) {
	base := payload(str("orders"), oneByte(16), be32(4))
	cases := []struct {
		name string
		tail []byte
		want *CreateTopicExRequest // nil: malformed
	}{
		{"original layout", nil, &CreateTopicExRequest{Topic: new("orders"), Bits: 16, Ranges: 4}},
		{"replicas", oneByte(3), &CreateTopicExRequest{Topic: new("orders"), Bits: 16, Ranges: 4, Replicas: 3}},
		{"replicas 0 alone", oneByte(0), nil},
		{"replicas 0 and a policy", payload(oneByte(0), str("short")), &CreateTopicExRequest{Topic: new("orders"), Bits: 16, Ranges: 4, Policy: "short"}},
		{"replicas and a policy", payload(oneByte(2), str("short")), &CreateTopicExRequest{Topic: new("orders"), Bits: 16, Ranges: 4, Replicas: 2, Policy: "short"}},
		{"present empty policy", payload(oneByte(0), str("")), nil},
		{"absent policy", payload(oneByte(1), absent()), nil},
		{"policy name of 256 bytes", payload(oneByte(1), str(strings.Repeat("p", 256))), nil},
		{"policy cut short", payload(oneByte(1), str("short"))[:8], nil},
		{"a byte after the policy", payload(oneByte(1), str("short"), oneByte(0)), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r CreateTopicExRequest
			err := r.Decode(payload(base, c.tail))
			if c.want == nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err = %v, want malformed", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(r, *c.want) {
				t.Fatalf("decoded %+v, %v; want %+v", r, err, *c.want)
			}
			if again := r.AppendPayload(nil); !bytes.Equal(again, payload(base, c.tail)) {
				t.Fatalf("re-encoded %x", again)
			}
		})
	}
}

func TestVersionsListPolicyKeysAndVersion2(t *testing.T) {
	got := map[uint16]KeyVersion{}
	for _, kv := range Versions() {
		got[kv.Key] = kv
	}
	for _, key := range []uint16{KeyDefinePolicy, KeyDeletePolicy, KeyListPolicies, KeyBindTopicPolicy, KeyGetTopicPolicy} {
		if kv, ok := got[key]; !ok || kv.Min != 1 || kv.Max != 1 {
			t.Errorf("key %d (%s): %+v, %v", key, KeyName(key), kv, ok)
		}
	}
	for _, key := range []uint16{KeyCreateTopicEx, KeyDescribeGroup, KeyFetchBatches, KeySubscribeBatches} {
		if kv := got[key]; kv.Min != 1 || kv.Max != 2 {
			t.Errorf("key %s: %+v, want versions 1 to 2", KeyName(key), kv)
		}
	}
	if kv := got[KeyProduceBatches]; kv.Max != 1 {
		t.Errorf("produce_batches: %+v, want version 1 only", kv)
	}
}
