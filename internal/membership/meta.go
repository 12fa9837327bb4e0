package membership

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"

	"github.com/hashicorp/memberlist"
)

// Limits on what a node may advertise. The encoded metadata must fit in
// memberlist's MaxMetaSize (512 bytes) because it rides in every alive
// message; these bounds keep any single field from eating it.
const (
	MaxMetaSize       = memberlist.MetaMaxSize
	MaxAttributes     = 16
	MaxAttributeKey   = 32
	MaxAttributeValue = 64
	MaxAddrLen        = 128
	MaxVersionLen     = 32
)

// metaFormat is the first byte of the encoded metadata. A new layout gets a
// new byte; a node refuses members whose format it does not know.
const metaFormat = 1

// flagLeaving marks a node that has begun a graceful leave.
const flagLeaving = 1

var (
	// ErrInvalidNode is returned for node metadata that breaks a rule:
	// a zero id, a malformed address, a bad attribute key or value.
	ErrInvalidNode = errors.New("membership: invalid node metadata")
	// ErrMetaTooLarge is returned when the encoded metadata would exceed
	// MaxMetaSize.
	ErrMetaTooLarge = errors.New("membership: node metadata too large")
)

// NodeInfo is what a node tells the cluster about itself.
type NodeInfo struct {
	ID uint64
	// ClientAddr, PeerAddr and HTTPAddr are host:port; empty when the node
	// does not serve that listener.
	ClientAddr string
	PeerAddr   string
	HTTPAddr   string
	// Attributes are labels such as rack=a or zone=z1. Keys are 1 to
	// MaxAttributeKey characters of [a-z0-9_.-] starting with a letter;
	// values are 1 to MaxAttributeValue characters of [A-Za-z0-9_.:-].
	Attributes map[string]string
	// Version is the software version the node runs (for rolling
	// upgrades): up to MaxVersionLen printable ASCII characters.
	Version string
}

// Clone returns a copy that shares no map with n.
func (n NodeInfo) Clone() NodeInfo {
	n.Attributes = maps.Clone(n.Attributes)
	return n
}

// Validate checks every field against the rules above.
func (n NodeInfo) Validate() error {
	if n.ID == 0 {
		return fmt.Errorf("%w: node id 0 is reserved", ErrInvalidNode)
	}
	for _, a := range []struct{ name, addr string }{{"client", n.ClientAddr}, {"peer", n.PeerAddr}, {"http", n.HTTPAddr}} {
		if err := validAddr(a.addr); err != nil {
			return fmt.Errorf("%w: %s address %q: %v", ErrInvalidNode, a.name, a.addr, err)
		}
	}
	if len(n.Version) > MaxVersionLen || !allBytes(n.Version, printable) {
		return fmt.Errorf("%w: version %q: want at most %d printable ASCII characters", ErrInvalidNode, n.Version, MaxVersionLen)
	}
	return ValidateAttributes(n.Attributes)
}

// ValidateAttributes checks the count, keys and values of attrs.
func ValidateAttributes(attrs map[string]string) error {
	if len(attrs) > MaxAttributes {
		return fmt.Errorf("%w: %d attributes, at most %d", ErrInvalidNode, len(attrs), MaxAttributes)
	}
	for k, v := range attrs {
		if len(k) == 0 || len(k) > MaxAttributeKey || k[0] < 'a' || k[0] > 'z' || !allBytes(k, keyByte) {
			return fmt.Errorf("%w: attribute key %q: want 1-%d of [a-z0-9_.-], starting with a letter", ErrInvalidNode, k, MaxAttributeKey)
		}
		if len(v) == 0 || len(v) > MaxAttributeValue || !allBytes(v, valueByte) {
			return fmt.Errorf("%w: attribute %s=%q: want 1-%d of [A-Za-z0-9_.:-]", ErrInvalidNode, k, v, MaxAttributeValue)
		}
	}
	return nil
}

func validAddr(addr string) error {
	if addr == "" {
		return nil
	}
	if len(addr) > MaxAddrLen {
		return fmt.Errorf("longer than %d bytes", MaxAddrLen)
	}
	_, _, err := net.SplitHostPort(addr)
	return err
}

func allBytes(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func printable(c byte) bool { return c >= 0x20 && c < 0x7f }

func keyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

func valueByte(c byte) bool {
	return keyByte(c) || c >= 'A' && c <= 'Z' || c == ':'
}

// encodeMeta lays out n as
//
//	format(1) flags(1) uvarint(id)
//	str(client) str(peer) str(http) str(version)
//	uvarint(count) count × (str(key) str(value))   keys ascending
//
// where str is uvarint(len) followed by the bytes. It refuses metadata
// that fails Validate or does not fit in MaxMetaSize.
func encodeMeta(n NodeInfo, leaving bool) ([]byte, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	flags := byte(0)
	if leaving {
		flags |= flagLeaving
	}
	b := []byte{metaFormat, flags}
	b = binary.AppendUvarint(b, n.ID)
	for _, s := range []string{n.ClientAddr, n.PeerAddr, n.HTTPAddr, n.Version} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(n.Attributes)))
	for _, k := range slices.Sorted(maps.Keys(n.Attributes)) {
		b = appendString(appendString(b, k), n.Attributes[k])
	}
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, memberlist allows %d: shorten the attributes or addresses", ErrMetaTooLarge, len(b), MaxMetaSize)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decodeMeta parses encodeMeta's layout and validates the result. Trailing
// bytes, unknown flags and unknown formats are refused.
func decodeMeta(b []byte) (NodeInfo, bool, error) {
	d := decoder{b: b}
	format, flags := d.byte(), d.byte()
	var n NodeInfo
	n.ID = d.uvarint()
	n.ClientAddr, n.PeerAddr, n.HTTPAddr, n.Version = d.string(), d.string(), d.string(), d.string()
	count := d.uvarint()
	if count > MaxAttributes {
		return NodeInfo{}, false, fmt.Errorf("%w: %d attributes", ErrInvalidNode, count)
	}
	if count > 0 {
		n.Attributes = make(map[string]string, count)
	}
	for range count {
		k := d.string()
		n.Attributes[k] = d.string()
	}
	switch {
	case d.err != nil:
		return NodeInfo{}, false, fmt.Errorf("%w: %v", ErrInvalidNode, d.err)
	case format != metaFormat:
		return NodeInfo{}, false, fmt.Errorf("%w: format %d, this node reads %d", ErrInvalidNode, format, metaFormat)
	case flags&^flagLeaving != 0:
		return NodeInfo{}, false, fmt.Errorf("%w: unknown flags %#x", ErrInvalidNode, flags)
	case len(d.b) != 0:
		return NodeInfo{}, false, fmt.Errorf("%w: %d trailing bytes", ErrInvalidNode, len(d.b))
	case len(n.Attributes) != int(count):
		return NodeInfo{}, false, fmt.Errorf("%w: duplicate attribute key", ErrInvalidNode)
	}
	if err := n.Validate(); err != nil {
		return NodeInfo{}, false, err
	}
	return n, flags&flagLeaving != 0, nil
}

// decoder reads the metadata layout, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail("truncated string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = errors.New(msg)
	}
}
