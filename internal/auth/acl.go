package auth

import "strings"

// Permissions a user can hold.
const (
	PermAdmin   = "admin"
	PermProduce = "produce"
	PermConsume = "consume"
)

// Operations a grant can allow; they share their names with the coarse
// permissions.
const (
	OpProduce = PermProduce
	OpConsume = PermConsume
)

// MaxPatternLen bounds a grant pattern, in bytes.
const MaxPatternLen = 255

// Grant allows Operation on the topics Pattern matches.
type Grant struct {
	Operation string
	Pattern   string
}

// ValidPerms reports whether every entry is a known permission and none
// repeats. An empty list is valid: such a user relies on grants alone.
func ValidPerms(perms []string) bool {
	for i, p := range perms {
		if p != PermAdmin && p != PermProduce && p != PermConsume {
			return false
		}
		for _, q := range perms[:i] {
			if p == q {
				return false
			}
		}
	}
	return true
}

// HasPerm reports whether perms contains p.
func HasPerm(perms []string, p string) bool {
	for _, q := range perms {
		if q == p {
			return true
		}
	}
	return false
}

// ValidOperation reports whether op can be granted: produce or consume.
func ValidOperation(op string) bool { return op == OpProduce || op == OpConsume }

// ValidPattern reports whether p is a grant pattern: non-empty, at most
// MaxPatternLen bytes, with "*" allowed only as its last byte.
func ValidPattern(p string) bool {
	if p == "" || len(p) > MaxPatternLen {
		return false
	}
	i := strings.IndexByte(p, '*')
	return i < 0 || i == len(p)-1
}

// MatchPattern reports whether pattern names topic: a trailing "*" makes the
// rest a prefix ("*" alone matches everything); otherwise the match is
// literal. Invalid patterns match nothing.
func MatchPattern(pattern, topic string) bool {
	if !ValidPattern(pattern) {
		return false
	}
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(topic, prefix)
	}
	return pattern == topic
}

// Allowed decides whether a user with perms and grants may perform op on
// topic: admin always may; outside strict mode the coarse permission for op
// is enough; otherwise a grant for op must match topic. Unknown operations
// are refused to everyone but admin.
func Allowed(perms []string, grants []Grant, strict bool, op, topic string) bool {
	if HasPerm(perms, PermAdmin) {
		return true
	}
	if !ValidOperation(op) {
		return false
	}
	if !strict && HasPerm(perms, op) {
		return true
	}
	for _, g := range grants {
		if g.Operation == op && MatchPattern(g.Pattern, topic) {
			return true
		}
	}
	return false
}

// Visible reports whether a user with perms and grants may see topic in
// listings: it may produce to it or consume from it.
func Visible(perms []string, grants []Grant, strict bool, topic string) bool {
	return Allowed(perms, grants, strict, OpConsume, topic) || Allowed(perms, grants, strict, OpProduce, topic)
}
