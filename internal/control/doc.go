// Package control is a node's control plane: the cluster's metadata
// (internal/metadata) replicated by Raft (internal/raft) and sharded into
// vnodes, with the routing that lets any node serve any metadata request.
//
// # Groups
//
// The metadata lives in Raft groups, all hosted by the node's one
// multi-raft host over one durable log (internal/raft/logstore, adapted
// to raft.LogStore by durableLog):
//
//   - the root group (RootGroup, 1) holds the cluster-wide metadata: users,
//     ACLs, the cluster id and the secret that MACs cursors, through the
//     existing metadata commands; and the Registry: the registered nodes
//     with their peer addresses and attributes, the ring size, the vnode
//     factor, the committed voter set of every group and the leaders an
//     applied rebalance chose;
//   - vnode group v (VnodeGroup(v) = v+2), one per vnode of the ring
//     (placement.Ring, 8 by default), holds the topics whose names hash to
//     v, with their ranges, segments and consumer-group positions.
//
// Each group's state machine is a metadata.State (the root's, or a vnode's
// made by metadata.NewShard with the group id as its shard), plus the
// registry in the root, plus a bounded table of recent request ids.
//
// # Ids
//
// A vnode allocates topic, range and segment ids in its shard's block
// (metadata.ShardOf(id) is the group id), so ids are unique cluster-wide
// and any id routes to its vnode (GroupOfID): the broker's maps keyed by
// range or segment id never collide, and a cursor naming a range can be
// served by any node.
//
// # Every node replicates every group
//
// Every registered node holds a replica of the root and of every vnode:
// a voter where the registry's committed voter set names it
// (Config.Factor voters per vnode, 3 by default, clamped to the node
// count; up to 5 voters for the root), a learner everywhere else. So every node has a complete local
// view and serves reads without a hop; the view may be slightly behind
// the leader, which W5 allows (a cache may be behind, never ahead of what
// is committed), and Barrier (ReadIndex) makes a read linearizable where
// it must be (C2). Writes go to the group's leader. The cost is that every
// node receives every metadata entry and a heartbeat per group: the
// traffic and apply work grow with nodes × vnodes. Metadata changes are
// rare (topic creation, rolls, splits, commits of group positions) and the
// host coalesces heartbeats per node pair, so this is cheap for tens of
// nodes; for hundreds, learners should become optional (a node would
// follow only the vnodes it serves and forward other reads), which this
// API allows without changing callers.
//
// # Writes
//
// Apply routes a command (route): users, ACLs and init_cluster to the
// root; create_topic, delete_topic and the group-position commands by
// topic name on the ring; open_segment, split_range and merge_ranges by
// the range id's shard; seal_segment and delete_segment by the segment
// id's shard. It proposes at this node when it leads the group, and
// otherwise forwards the encoded entry over peer.ChannelForward to the
// leader named by raft.NotLeaderError or known locally (the receiver only
// proposes locally, it never forwards again). Failures that leave the
// outcome unknown (leadership lost, a lost connection, the host's request
// timeout) are retried with the same entry until the caller's ctx ends,
// then Apply returns ErrUnavailable, which the broker maps to the
// retriable reason metadata_unavailable. A group without a quorum
// therefore answers within the caller's timeout and never hangs (C3).
// The outcome is then unknown; a new Apply of the same command is a new
// request, so a create that did commit answers already_exists.
//
// Retries do not apply a command twice: each Apply draws a request id,
// the entry carries it with the proposing node's id, and the group's state
// machine remembers the last maxDedup ids with their results: a second
// copy of an entry (proposed again after an ambiguous failure, and
// committed after all) answers the first copy's result and changes
// nothing. So a retried create_topic returns the topic it created, not
// already_exists, and a retried open_segment the segment it opened.
//
// # Reads and notification
//
// View, ViewRoot, ViewID, ViewTopic, ViewTopicName and ViewEach run a
// function on local replicas under the group's read lock (short, and not
// calling the Node). Config.OnApplied is called after every metadata
// command applied on this node, in log order per group, from the raft
// apply path: a topic created, a range split or a segment sealed through
// another node reaches the broker there. It must not block, nor call
// Apply, Barrier, Join, Remove or Status. Config.OnRestored says a group's
// state was replaced by a snapshot (read it again).
//
// # Quotas across vnodes
//
// A Quota is checked by metadata.State.Apply exactly, against one state.
// A command's cluster-wide limits (Topics, Ranges, OwnerTopics,
// OwnerRanges) are turned into limits for its vnode by the proposing node,
// which subtracts what the other vnodes hold in its local view. Within a
// vnode the limit is exact; across vnodes concurrent creates may overshoot
// it by what other vnodes applied and this node has not seen yet, which is
// bounded by the replication lag (a Barrier on every vnode first removes
// even that, at the price of a round trip per vnode).
//
// # Membership changes
//
// Open with Config.Bootstrap on an empty log creates the root (its
// initial, index-1 state already holding the registry and init_cluster)
// and then the vnodes, each with this node as the only voter. A new node
// calls Join: a seed forwards its registration to the root's leader and
// answers with the registry; the node then hosts empty replicas of every
// group. The registry's voter sets grow to their factor with it (the
// best-ranked nodes by placement.VnodeReplicas fill a short set) but do
// not move for balance: that is a rebalance (rebalance_plan.go), staged
// and planned by the root's leader over the live nodes, committed by an
// operator (Rebalance with apply) or, with Config.AutoRebalance, by the
// root's leader once the nodes have been stable for
// Config.RebalanceStable. Every node runs a reconciler that, for the
// groups it leads, moves the replicas towards the registry one change at
// a time (plan): members become learners, learners the registry names
// are promoted once caught up, and only then does a voter it no longer
// names step down (removed, then added back as a learner): add before
// remove, the factor kept. Once a group's voters are settled, its leader
// hands the leadership to the voter a rebalance chose, if any
// (raft.Host.TransferLeadership). Remove deletes a node from the registry; the same steps
// move its voter slots elsewhere and take it out of every group. A
// reopened node recovers every group from its log and catches up from
// the leaders (entries, or a snapshot when it lagged far).
//
// No change may leave a group without a live quorum. A node counts as
// live at a group's leader when a raft frame from it arrived after the
// moment of the check (every replica answers the leader's heartbeats
// each tick). The root's leader refuses a Remove that, once placement
// has moved the voters, would leave some group's voters without a live
// quorum, naming the down nodes to bring back or remove first; removing
// a down node is allowed whenever the live voters left form a quorum,
// which is how a cluster recovers from a dead node. Each group's leader
// checks every promotion and removal the same way before making it, and
// holds back (GroupStatus.Waiting says why) one that would not keep a
// live quorum.
//
// A removed node id is never registered again (Registry.Removed): its
// replicas may come back with their old logs, and raft must not meet a
// replica under an id its groups removed. The machine rejoins with a
// wiped data directory and a new node id. Join therefore registers a
// restarted node again unless its own root replica names it exactly as
// its Config does and a Barrier confirms that replica current; the
// registration records a changed address or attributes, and is refused
// for a removed id.
//
// # Goroutines
//
// A Node runs two, both started by Open and ended by Close: the raft
// host's loop (raft.Host.Run), and the reconciler, woken every
// Config.ReconcileTicks on Config.Clock. Forwarded requests run on the
// transport's bounded handler pool; a join request handled for another
// node is bounded by a timer goroutine that ends with it.
package control
