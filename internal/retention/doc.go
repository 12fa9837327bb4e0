// Package retention decides, from a topic's storage policy and the node's
// defaults, what a topic's effective settings are and which sealed
// segments of a range have expired. It is pure: the caller passes the
// clock reading (unix ms) and the metadata it read, and proposes the
// deletions it gets back through the control plane.
//
// # Resolution
//
// A topic is bound to a policy name or to none. Resolve merges the bound
// policy over the node's Defaults field by field: a field present in the
// policy comes from it (origin "policy"), an absent one from the defaults
// (origin "global"). A topic bound to a name that no policy defines
// (resolution "unresolved") expires nothing: its retention fields are off
// with origin "unresolved", so a policy deleted under a bound topic, or a
// bind that raced a delete, can never widen what is removed.
//
// # Expiry
//
// Expired looks at one range's segments in offset order and returns a
// prefix of its sealed segments: retention removes data only from the
// front, so a reader's gap is always at the start of what it has not
// read. A sealed segment expires when every record in it has passed its
// TTL (reason "ttl": filtered data, never reported as a skip), or by age
// since its seal, or while the range's sealed bytes or records exceed the
// bound (reason "retention"). The active segment never expires here; the
// broker rolls it by segment_max_age_ms so that retention can reach it.
//
// # TTL
//
// A record's TTL is the decimal header TTLHeader, read with ParseTTL; the
// node turns it into an absolute expiry from its own clock with ExpiryAt
// and stamps it in the record's expiry field; a client's ExpiryHeader is
// removed, never trusted.
package retention
