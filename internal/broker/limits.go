package broker

import (
	"context"
	"fmt"

	"github.com/malachi-log/malachi/internal/metadata"
)

// Limits bound what the node holds, and what one ordinary (non-admin) user
// may make it hold, so that no authenticated user can exhaust it. Zero
// values take the defaults; a refusal is ErrQuotaExceeded (the wire's
// quota_exceeded) and changes nothing.
//
// The per-user shares are a tenth of the node's: it takes ten users at
// their limits to fill the node, and one user filling its share leaves the
// rest to everyone else. Node-wide limits hold for administrators too (they
// protect the node, not a budget); the per-user limits do not.
type Limits struct {
	// MaxTopics bounds the topics of the node. Default 10,000: each topic
	// costs metadata in every snapshot and at least one range.
	MaxTopics int
	// MaxRanges bounds the ranges of the node, active and sealed (a split
	// seals one range and adds two). Default 100,000. An active range holds
	// its active segment's file open for as long as it takes writes, so this
	// is also the bound on open active-segment files; the open-file limit of
	// the process must allow it (checked at start-up, with a warning).
	MaxRanges int
	// MaxTopicsPerUser bounds the topics one non-admin user created that
	// still exist. Default 1,000.
	MaxTopicsPerUser int
	// MaxRangesPerUser bounds the ranges of those topics, including ranges
	// splits added later. Default 10,000.
	MaxRangesPerUser int
	// MaxInitialRanges bounds the ranges a non-admin user's create_topic may
	// ask for. Default 64 (the automatic splitter's per-topic cap): one
	// request of 1,024 ranges would take a tenth of a user's share and
	// 1,024 potential open files at once. Administrators may ask for up to
	// metadata.MaxInitialRanges (1,024).
	MaxInitialRanges int
	// MaxGroupsPerTopic bounds the consumer groups with live members on one
	// topic, and separately the groups with a committed position on it.
	// Default 1,000.
	MaxGroupsPerTopic int
	// MaxGroupsPerUser bounds the groups with live members that one
	// non-admin user's members created. Default 100: the node's group table
	// (Config.MaxGroups) then takes a hundred users to fill, where one
	// consumer could fill it before.
	MaxGroupsPerUser int
	// MaxOpenSealedFiles bounds the cache of open sealed-segment files (the
	// store's LRU). Default 256.
	MaxOpenSealedFiles int
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxTopics, 10_000)
	def(&l.MaxRanges, 100_000)
	def(&l.MaxTopicsPerUser, 1_000)
	def(&l.MaxRangesPerUser, 10_000)
	def(&l.MaxInitialRanges, 64)
	def(&l.MaxGroupsPerTopic, 1_000)
	def(&l.MaxGroupsPerUser, 100)
	def(&l.MaxOpenSealedFiles, 256)
	return l
}

// validate refuses limits that are negative or cannot be honoured, so a
// misconfiguration stops the start rather than a user's request later. A
// per-user limit above the node's is allowed: the node's limit then binds
// first, which is what an operator lowering only the node's limit means.
func (l Limits) validate(maxGroups int) error {
	for name, v := range map[string]int{
		"MaxTopics": l.MaxTopics, "MaxRanges": l.MaxRanges, "MaxTopicsPerUser": l.MaxTopicsPerUser,
		"MaxRangesPerUser": l.MaxRangesPerUser, "MaxInitialRanges": l.MaxInitialRanges,
		"MaxGroupsPerTopic": l.MaxGroupsPerTopic, "MaxGroupsPerUser": l.MaxGroupsPerUser,
		"MaxOpenSealedFiles": l.MaxOpenSealedFiles, "MaxGroups": maxGroups,
	} {
		if v < 0 {
			return fmt.Errorf("broker: %s %d is negative", name, v)
		}
	}
	if l.MaxInitialRanges > metadata.MaxInitialRanges {
		return fmt.Errorf("broker: MaxInitialRanges %d is above the %d a topic can start with",
			l.MaxInitialRanges, metadata.MaxInitialRanges)
	}
	return nil
}

// quotaFor is the quota a create_topic by id is held to: the node's limits,
// and for a non-admin user its own share too.
func (l Limits) quotaFor(id Identity) *metadata.Quota {
	q := &metadata.Quota{Topics: l.MaxTopics, Ranges: l.MaxRanges}
	if !IsAdmin(id) {
		q.OwnerTopics, q.OwnerRanges = l.MaxTopicsPerUser, l.MaxRangesPerUser
	}
	return q
}

// CreateTopicAs creates a topic for an authenticated user: the topic
// records the user as its owner, and the node's limits and (for a
// non-admin) the user's own share hold. bits 0 = default, ranges 0 = 1.
func (b *Broker) CreateTopicAs(ctx context.Context, id Identity, name string, bits uint8, ranges int) error {
	if id.User == "" {
		return ErrPermission // an unaccountable caller gets no share
	}
	if err := b.checkCreate(id.User, IsAdmin(id), name, ranges); err != nil {
		return err
	}
	q := b.cfg.Limits.quotaFor(id)
	_, err := b.apply(ctx, metadata.Command{Kind: "create_topic", Topic: name, Bits: bits, Ranges: ranges, Owner: id.User, Quota: q})
	return err
}

// checkCreate names the limit a create would pass, so the refusal says
// which. The state machine checks again when it applies the command: this
// look is only for the message, and a create racing it is still bounded.
func (b *Broker) checkCreate(user string, admin bool, name string, ranges int) error {
	l := b.cfg.Limits
	n := max(ranges, 1)
	if !admin && n > l.MaxInitialRanges {
		return quotaError("a topic may start with %d ranges", l.MaxInitialRanges)
	}
	var exists bool
	_ = b.plane.ViewTopicName(name, func(st *metadata.State) { _, exists = st.Topic(name) })
	if exists {
		return nil // already_exists is the better answer
	}
	var topics, rs, allTopics, allRanges int
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		t, r := st.OwnerUsage(user)
		topics, rs = topics+t, rs+r
		allTopics += st.TopicCount()
		allRanges += st.RangeCount()
	})
	switch {
	case allTopics >= l.MaxTopics:
		return quotaError("the node holds %d topics", l.MaxTopics)
	case allRanges+n > l.MaxRanges:
		return quotaError("the node holds %d ranges", l.MaxRanges)
	case !admin && topics >= l.MaxTopicsPerUser:
		return quotaError("user %s created %d topics", user, l.MaxTopicsPerUser)
	case !admin && rs+n > l.MaxRangesPerUser:
		return quotaError("user %s holds %d ranges", user, l.MaxRangesPerUser)
	}
	return nil
}

// checkRangeRoom refuses a split or merge that would pass MaxRanges before
// any segment is sealed for it, so the refusal changes nothing.
func (b *Broker) checkRangeRoom(add int) error {
	var n int
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) { n += st.RangeCount() })
	if n+add > b.cfg.Limits.MaxRanges {
		return quotaError("the node holds %d ranges", b.cfg.Limits.MaxRanges)
	}
	return nil
}

// rangeQuota is the quota of a split or merge.
func (b *Broker) rangeQuota() *metadata.Quota {
	return &metadata.Quota{Ranges: b.cfg.Limits.MaxRanges}
}

// quotaError is ErrQuotaExceeded with the limit that was reached.
func quotaError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrQuotaExceeded}, args...)...)
}
