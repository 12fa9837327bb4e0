package metrics

import "github.com/prometheus/client_golang/prometheus"

// The series. Names keep the original system's where it had one
// (records_produced_total, failed_auth_total, topic_ranges...); units are
// in the names and counters end in _total. docs/operations.md describes
// each and what to alert on.

var allDescs []*prometheus.Desc

func desc(name, help string, labels ...string) *prometheus.Desc {
	d := prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
	allDescs = append(allDescs, d)
	return d
}

// Node.
var (
	descUp     = desc("up", "1 while the node answers scrapes.")
	descUptime = desc("uptime_seconds", "Seconds since the node's broker opened.")
	descBuild  = desc("build_info", "1, labelled with the node's version.", "version")
)

// Client traffic, counted by the client server per request.
var (
	descRecordsProduced = desc("records_produced_total", "Records clients produced and the node acknowledged durable.")
	descBytesProduced   = desc("bytes_produced_total", "Bytes of acknowledged produces: keys and values of v1 records, stored batch bytes of v2.")
	descRecordsConsumed = desc("records_consumed_total", "Records delivered to clients by fetches and subscription pushes.")
	descBytesConsumed   = desc("bytes_consumed_total", "Bytes delivered to clients: keys and values of v1 records, stored batch bytes of v2.")
	descProduceRequests = desc("produce_requests_total", "Produce requests by result: ok or the wire reason of the refusal.", "result")
	descFetchRequests   = desc("fetch_requests_total", "Fetch requests by result: ok or the wire reason of the refusal (pushes are not requests).", "result")
	descOtherRefused    = desc("requests_refused_total", "Refused requests other than produce and fetch, by wire reason.", "reason")
	descQuotaRefused    = desc("quota_refusals_total", "Requests refused because a quota or rate limit held, by reason.", "reason")
	descProduceLatency  = desc("produce_latency_seconds", "Time from a produce request's arrival to its answer (durable or refused), per request.")
	descFetchLatency    = desc("fetch_latency_seconds", "Time to answer a fetch request, long-poll wait included, per request.")
)

// Connections and security.
var (
	descConnsOpen        = desc("connections_open", "Client connections open now.")
	descConnsAccepted    = desc("connections_accepted_total", "Client connections admitted.")
	descConnsRefused     = desc("connection_limit_blocked_total", "Client connections refused at accept, by reason.", "reason")
	descAuthAttempts     = desc("auth_attempts_total", "Logins by result: ok or the refusal's wire reason.", "result")
	descFailedAuth       = desc("failed_auth_total", "Logins and /metrics scrapes refused for their credentials (not for a lockout, a rate limit or the node's state).")
	descRateLimitBlocked = desc("rate_limit_blocked_total", "Logins and requests refused with rate_limit_exceeded.")
	descLockedRefused    = desc("account_locked_refusals_total", "Logins refused because the account was locked.")
	descLockouts         = desc("account_lockouts_total", "Account lockouts that began (too many failed logins).")
	descScrapeRefused    = desc("metrics_scrapes_refused_total", "Scrapes of /metrics refused, by reason: auth_required (no credentials) or the login refusal.", "reason")
)

// Storage.
var (
	descCommitRounds   = desc("storage_commit_rounds_total", "Group-commit rounds that wrote or synced something.")
	descFsyncs         = desc("storage_fsyncs_total", "fdatasync calls of segment files and of the node journal.")
	descDurableBatches = desc("storage_durable_batches_total", "Batches this node's store made durable, its copies of replicated segments included.")
	descDurableBytes   = desc("storage_durable_bytes_total", "Bytes this node's store made durable, its copies of replicated segments included.")
	descFsyncLatency   = desc("storage_fsync_latency_seconds", "Duration of each fdatasync a commit round waited for.")
	descRoundBatches   = desc("storage_commit_round_batches", "Batches acknowledged per group-commit round.")
	descRoundBytes     = desc("storage_commit_round_bytes", "Bytes acknowledged per group-commit round.")
	descReadPoolMapped = desc("storage_read_pool_mapped_bytes", "Memory mapped on huge pages that the node's read buffers are carved from, free and in use (bounded, 128 MiB by default).")
	descReadPoolFree   = desc("storage_read_pool_free_bytes", "Free read buffers the node keeps for reuse (bounded, 64 MiB by default).")
	descDiskState      = desc("storage_disk_state", "1 for the segment disk's state now: ok, full (refusing writes until space returns) or failing (fail-stop).", "state")
)

// Topics, capped at Options.MaxTopics.
var (
	descTopics            = desc("topics", "Topics this node reports (all on a single node; those whose metadata it leads in a cluster).")
	descTopicsFolded      = desc("metrics_topics_folded", "Topics past the per-topic series cap, summed under topic=\"_other\".")
	descTopicRanges       = desc("topic_ranges", "Ranges of the topic, active and sealed.", "topic")
	descTopicRangesActive = desc("topic_ranges_active", "Active ranges of the topic.", "topic")
	descTopicSegments     = desc("topic_segments", "Segments of the topic.", "topic")
	descTopicBytes        = desc("topic_bytes", "Bytes stored by the topic (one copy).", "topic")
	descTopicRecords      = desc("topic_records", "Records stored by the topic.", "topic")
)

// Consumer groups, capped at Options.MaxGroups.
var (
	descLagRecords   = desc("consumer_group_lag_records", "Records after the group's committed position.", "topic", "group")
	descLagSeconds   = desc("consumer_group_lag_seconds", "Age of the oldest record the group has yet to read (producer timestamp of its batch); 0 when caught up, absent when not known.", "topic", "group")
	descGroupsFolded = desc("metrics_groups_truncated", "1 when more groups than the cap exist and some have no lag series.")
	descLagUpdated   = desc("consumer_group_lag_updated_timestamp_seconds", "When the lag series were last computed (Unix seconds); they are as old as time() minus this.")
	descLagDuration  = desc("consumer_group_lag_refresh_seconds", "How long the last lag computation ran.")
	descLagBytes     = desc("consumer_group_lag_refresh_bytes", "Bytes the last lag computation read from segment copies here.")
	descLagCut       = desc("consumer_group_lag_refresh_incomplete", "1 when the last lag computation ran out of time and some groups have no series.")
)

// Retention and TTL: separate series, a filtered record is not a skip.
var (
	descSegmentsExpired = desc("retention_segments_expired_total", "Segments retention deleted on this node's proposal.")
	descSkipsTold       = desc("retention_skipped_records_told_total", "Records retention deleted that answers told readers they passed over.")
	descTTLFiltered     = desc("ttl_filtered_records_total", "Records reads passed over because their TTL had expired.")
)

// Cluster: raft, membership, replication, repair.
var (
	descMembers           = desc("cluster_members", "Nodes by liveness in this node's view.", "state")
	descRaftGroups        = desc("raft_groups", "Metadata raft groups hosted here, by this replica's role.", "role")
	descRaftGroupsLed     = desc("raft_groups_led", "Metadata raft groups this node leads.")
	descRaftApplyLagMax   = desc("raft_apply_lag_entries_max", "The most entries one hosted group has committed and not yet applied here.")
	descRaftApplyLag      = desc("raft_apply_lag_entries", "Entries committed and not yet applied here (commit - applied); with the per-group option only.", "group")
	descRaftLeader        = desc("raft_leader", "1 when this node leads the group; with the per-group option only.", "group")
	descRaftTerm          = desc("raft_term", "The group's raft term here; with the per-group option only.", "group")
	descRaftLeaderChanges = desc("raft_leader_changes_total", "Times a hosted group was seen with a new leader.")
	descRaftProposals     = desc("raft_proposals_total", "Entries proposed at this node as leader.")
	descRaftSnapshotsSent = desc("raft_snapshots_sent_total", "Raft snapshots sent to followers.")
	descRaftSnapshots     = desc("raft_snapshots_total", "Raft snapshots taken of the state machines.")
	descRaftGroupFailures = desc("raft_group_failures_total", "Raft groups stopped on this node after a fault.")
	descReplPrimaries     = desc("replication_primaries", "Segments this node writes as primary.")
	descReplCopies        = desc("replication_copies", "Segments this node follows as a copy.")
	descReplUncommitted   = desc("replication_uncommitted_records", "Records appended at this node's primaries, not yet under their commit watermark.")
	descReplCommitLagMax  = desc("replication_commit_watermark_lag_records", "The most records one primary here holds above its commit watermark.")
	descReplFollowerLag   = desc("replication_follower_lag_records", "The most records any follower of a primary here has yet to acknowledge.")
	descUnderReplicated   = desc("under_replicated_segments", "Segments of the topics whose metadata this node leads with fewer live replicas than their factor, in its view.")
	descHealing           = desc("healing_segments", "Copies this node is filling as a heal target.")
	descDamaged           = desc("damaged_copies", "Damaged copies of sealed segments of the topics whose metadata this node leads.")
	descHealProblems      = desc("heal_problems", "Segments this node's last heal plan could not heal.")
	descScrubCopies       = desc("scrub_copies", "Sealed copies this node scrubs.")
	descScrubBehind       = desc("scrub_behind", "1 when the scrub rate is too low to verify every copy each interval.")
	descScrubs            = desc("scrub_verifications_total", "Copies the scrubber verified, by outcome: whole, damaged, short, unreadable.", "outcome")
)
