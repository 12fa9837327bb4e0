// Package membership tells a node which other nodes are in the cluster,
// whether they are alive, and what they advertise: their id, their client,
// peer and HTTP addresses, their attributes (rack, zone) and their software
// version. The broker consumes it as a snapshot (Members) and a stream of
// events (Events); placement and the vnode hosts react to both.
//
// # Implementations
//
// Membership is an interface. Gossip implements it with SWIM through
// hashicorp/memberlist (UDP probes and gossip, TCP state sync on one port).
// Network and Fake implement it in memory for tests of the packages that
// consume it and for the simulator: changes there apply synchronously.
//
// # Node metadata
//
// A node's NodeInfo rides in memberlist's node metadata, which is limited
// to MaxMetaSize (512) bytes because every alive message carries it. The
// encoding is compact and versioned:
//
//	+--------+-------+-------------+-------------+-----------+-----------+-----------+
//	| format | flags | uvarint id  | str client  | str peer  | str http  | str vers  |
//	|  0x01  |  1 B  |             |             |           |           |           |
//	+--------+-------+-------------+-------------+-----------+-----------+-----------+
//	| uvarint count | count × (str key, str value), keys ascending                  |
//	+---------------+---------------------------------------------------------------+
//
// str is a uvarint length and the bytes. Flag bit 0 marks a node that has
// begun a graceful leave. A node refuses (and logs) a member whose metadata
// does not decode, uses an unknown format byte, or names an id that differs
// from its memberlist name. Attribute keys, values, addresses and the
// version are bounded and checked (NodeInfo.Validate); SetAttributes
// refuses a change that would not fit, with ErrMetaTooLarge, before
// anything is announced.
//
// # Events and liveness
//
// memberlist v0.7.0 reports three things: a node joined, a node's metadata
// changed, and a node is gone (NotifyLeave), the last for a graceful leave
// and a failure alike. Gossip tells those two apart with the leaving flag:
// Leave first announces metadata with the flag set, waits for that
// broadcast, then sends memberlist's leave. A member that departs with the
// flag is reported as EventLeave (StateLeft), one without as EventDead
// (StateDead). A member that missed the flagged update (it arrived after
// the leave, which the wait makes unlikely) reports a dead node instead of
// a departed one; both mean "gone" to the broker.
//
// Suspicion is internal to memberlist: it is not reported by its
// delegates, and the State field of its Node is never set, so Gossip never
// produces EventSuspect or StateSuspect. A suspect node is either refuted
// and stays alive, or is declared dead within SuspicionMult ×
// max(1, log10(n)) × ProbeInterval and reported as EventDead. The Fake
// produces suspicion (Network.Suspect) so consumers can handle it.
//
// Events are delivered on a bounded channel and never block gossip. When
// the consumer falls behind and the channel fills, the queued events are
// replaced by a single EventResync, after which the consumer must reconcile
// with Members(). Events are never dropped without that marker. Events
// about the local node are not sent, except a conflict over its id;
// Members() includes it.
//
// The member table is bounded by Config.MaxMembers: members that left or
// died are evicted oldest first, and a new node that finds the table full
// of live members is refused at its alive message (and logged).
//
// # Node ids
//
// The memberlist node name is "node-<id>", so memberlist itself keeps one
// address per id: a second live node with the same id from another address
// is ignored by every node that knows the first, and both sides are told
// (EventConflict, logged at error level). A node that meets such a
// conflict while joining is the newcomer: Join shuts its gossip down
// without a leave (a leave would be taken as the incumbent's) and returns
// ErrDuplicateNodeID. A restarted node reuses its id: memberlist has it
// refute its old dead entry with a higher incarnation, and members report
// EventJoin. A node may also restart at another gossip address: once its
// old entry is dead or left, the id is reclaimed by the new address.
//
// # Security
//
// ClusterName is memberlist's packet label: nodes of other clusters are
// ignored, but it is not a secret. SecretKey turns on memberlist's
// AES-GCM encryption and authentication of all gossip (the label becomes
// authenticated data); without it, gossip is plain text, and memberlist
// logs a warning when bound to a public address.
package membership
