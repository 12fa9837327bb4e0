package membership

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func sampleInfo() NodeInfo {
	return NodeInfo{
		ID:         7,
		ClientAddr: "10.0.0.7:4040",
		PeerAddr:   "10.0.0.7:4042",
		HTTPAddr:   "10.0.0.7:4041",
		Attributes: map[string]string{"zone": "z1", "rack": "a"},
		Version:    "0.4.0",
	}
}

// TestMetaGolden pins the encoding: nodes of one cluster run different
// versions during an upgrade and must read each other's metadata.
func TestMetaGolden(t *testing.T) {
	got, err := encodeMeta(sampleInfo(), true)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("\x01\x01\x07" + "\x0d10.0.0.7:4040" + "\x0d10.0.0.7:4042" + "\x0d10.0.0.7:4041" +
		"\x050.4.0" + "\x02" + "\x04rack\x01a" + "\x04zone\x02z1")
	if !bytes.Equal(got, want) {
		t.Fatalf("encodeMeta =\n%q\nwant\n%q", got, want)
	}
	info, leaving, err := decodeMeta(want)
	if err != nil || !leaving || !reflect.DeepEqual(info, sampleInfo()) {
		t.Fatalf("decodeMeta = %+v, %v, %v", info, leaving, err)
	}
}

func TestMetaRoundTrip(t *testing.T) {
	key := rapid.StringMatching(`[a-z][a-z0-9_.-]{0,31}`)
	value := rapid.StringMatching(`[A-Za-z0-9_.:-]{1,64}`)
	rapid.Check(t, func(t *rapid.T) {
		n := NodeInfo{
			ID:         rapid.Uint64Range(1, 1<<63).Draw(t, "id"),
			ClientAddr: rapid.SampledFrom([]string{"", "127.0.0.1:4040", "[::1]:9", "host.example:1"}).Draw(t, "client"),
			PeerAddr:   rapid.SampledFrom([]string{"", "10.1.2.3:4042"}).Draw(t, "peer"),
			Version:    rapid.StringMatching(`[ -~]{0,32}`).Draw(t, "version"),
			Attributes: rapid.MapOfN(key, value, 0, 4).Draw(t, "attrs"),
		}
		if len(n.Attributes) == 0 {
			n.Attributes = nil
		}
		leaving := rapid.Bool().Draw(t, "leaving")
		b, err := encodeMeta(n, leaving)
		if err != nil {
			t.Fatalf("encodeMeta(%+v): %v", n, err)
		}
		got, gotLeaving, err := decodeMeta(b)
		if err != nil || gotLeaving != leaving || !reflect.DeepEqual(got, n) {
			t.Fatalf("round trip of %+v: %+v, %v, %v", n, got, gotLeaving, err)
		}
	})
}

func TestNodeInfoValidate(t *testing.T) {
	long := strings.Repeat("x", MaxAttributeValue+1)
	many := map[string]string{}
	for i := range MaxAttributes + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	cases := []struct {
		name string
		edit func(*NodeInfo)
	}{
		{"zero id", func(n *NodeInfo) { n.ID = 0 }},
		{"address without port", func(n *NodeInfo) { n.PeerAddr = "10.0.0.1" }},
		{"address too long", func(n *NodeInfo) { n.HTTPAddr = strings.Repeat("h", MaxAddrLen) + ":1" }},
		{"version not printable", func(n *NodeInfo) { n.Version = "1.0\n" }},
		{"version too long", func(n *NodeInfo) { n.Version = strings.Repeat("1", MaxVersionLen+1) }},
		{"upper-case key", func(n *NodeInfo) { n.Attributes = map[string]string{"Rack": "a"} }},
		{"key starting with a digit", func(n *NodeInfo) { n.Attributes = map[string]string{"1rack": "a"} }},
		{"empty key", func(n *NodeInfo) { n.Attributes = map[string]string{"": "a"} }},
		{"empty value", func(n *NodeInfo) { n.Attributes = map[string]string{"rack": ""} }},
		{"value with a space", func(n *NodeInfo) { n.Attributes = map[string]string{"rack": "a b"} }},
		{"value with '='", func(n *NodeInfo) { n.Attributes = map[string]string{"rack": "a=b"} }},
		{"value too long", func(n *NodeInfo) { n.Attributes = map[string]string{"rack": long} }},
		{"too many attributes", func(n *NodeInfo) { n.Attributes = many }},
	}
	for _, c := range cases {
		n := sampleInfo()
		c.edit(&n)
		if err := n.Validate(); !errors.Is(err, ErrInvalidNode) {
			t.Errorf("%s: Validate = %v, want ErrInvalidNode", c.name, err)
		}
		if _, err := encodeMeta(n, false); !errors.Is(err, ErrInvalidNode) {
			t.Errorf("%s: encodeMeta = %v, want ErrInvalidNode", c.name, err)
		}
	}
	if err := sampleInfo().Validate(); err != nil {
		t.Fatalf("sample: %v", err)
	}
}

// TestMetaTooLarge: attributes that are each valid but together exceed
// memberlist's limit are refused with the sizes in the error.
func TestMetaTooLarge(t *testing.T) {
	n := sampleInfo()
	n.Attributes = map[string]string{}
	for i := range MaxAttributes {
		n.Attributes[fmt.Sprintf("key%02d", i)] = strings.Repeat("v", MaxAttributeValue)
	}
	_, err := encodeMeta(n, false)
	if !errors.Is(err, ErrMetaTooLarge) || !strings.Contains(err.Error(), "512") {
		t.Fatalf("encodeMeta = %v, want ErrMetaTooLarge naming the 512-byte limit", err)
	}
}

func TestDecodeMetaRefuses(t *testing.T) {
	good, err := encodeMeta(sampleInfo(), false)
	if err != nil {
		t.Fatal(err)
	}
	dupKey := []byte("\x01\x00\x07\x00\x00\x00\x00\x02\x04rack\x01a\x04rack\x01b")
	cases := map[string][]byte{
		"empty":          nil,
		"unknown format": append([]byte{2}, good[1:]...),
		"unknown flag":   append([]byte{1, 4}, good[2:]...),
		"trailing byte":  append(append([]byte(nil), good...), 0),
		"duplicate key":  dupKey,
		"zero id":        []byte("\x01\x00\x00\x00\x00\x00\x00\x00"),
	}
	for i := 1; i < len(good); i++ {
		cases[fmt.Sprintf("truncated at %d", i)] = good[:i]
	}
	for name, b := range cases {
		if _, _, err := decodeMeta(b); !errors.Is(err, ErrInvalidNode) {
			t.Errorf("%s: decodeMeta = %v, want ErrInvalidNode", name, err)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	good, _ := encodeMeta(sampleInfo(), true)
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		n, leaving, err := decodeMeta(b)
		if err != nil {
			return
		}
		again, err := encodeMeta(n, leaving)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", n, err)
		}
		if n2, _, err := decodeMeta(again); err != nil || !reflect.DeepEqual(n, n2) {
			t.Fatalf("re-decode: %+v, %v", n2, err)
		}
	})
}
