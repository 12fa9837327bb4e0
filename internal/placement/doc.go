// Package placement decides where things live in the cluster: which vnode
// owns a topic's metadata, which nodes replicate a vnode, and which nodes
// hold a segment's copies. It is pure: no I/O, no goroutines, no clock, no
// locks. Callers pass the live nodes, their attributes and their loads; the
// same inputs always give the same answer, so every replica of a Raft group
// that applies a placement computes the same one.
//
// # The ring
//
// Vnodes sit on a ring of 2^32 points. Vnode i of n has the token
//
//	Token(i) = floor(i * 2^32 / n)
//
// and a topic's point is the top 32 bits of keyspace.Hash(topic name)
// (xxhash64, seed 0). A topic belongs to the vnode of the first token at or
// after its point, wrapping past the last token to vnode 0. The mapping is
// part of the durable contract (the ring and the vnode of every topic are
// recorded by the control plane), so ring_test.go pins golden values; a
// change that breaks them breaks every existing cluster.
//
// # Rendezvous hashing
//
// Replicas are chosen by HRW (highest random weight): every node gets the
// score xxhash64(key || bigendian64(node id)) and the nodes with the highest
// scores win, ties to the smaller id. The key is
//
//	vnode:   'v' bigendian32(vnode)
//	segment: 's' uvarint(len(topic)) topic bigendian64(range) bigendian64(segment)
//
// so vnodes and segments never share a ranking, and a range's successive
// segments rank the nodes independently: they stripe over the cluster
// instead of piling onto one replica set. HRW moves little when membership
// changes: a joining node takes a slot only where it outranks a current
// member, and a leaving node's slots go to the next in rank; no other key
// moves.
//
// # Constraints on a segment's replica set
//
// PlaceSegment and Replace honour, in this order of precedence:
//
//  1. spread_by: nodes are grouped into domains by one attribute (rack,
//     zone); replicas are picked round-robin across domains, each domain's
//     best candidate first, so the set covers as many domains as the factor
//     and the live nodes allow. A node without the attribute belongs to the
//     empty domain, which counts like any other.
//  2. min_domains: the set must cover at least this many domains. In hard
//     mode a placement that cannot is refused with ErrInsufficientDomains
//     and a reason; in soft mode it is placed anyway and the shortfall is
//     reported in Placement.Violation.
//  3. max_skew: given per-node loads, a node whose load is MaxSkew or more
//     above the least loaded live node is avoided while a node within the
//     cap can take its place. The replication factor is never sacrificed
//     for balance. The same rule on primary counts picks which replica of
//     the chosen set is the primary.
//  4. HRW rank decides everything that is left.
//
// The first replica is the primary. Replace keeps a set's live members, in
// order, and adds new ones under the same rules: healing never moves a copy
// that is still good.
package placement
