package metadata

import "slices"

// validTopicName: 1..249 bytes of [A-Za-z0-9._-], and not "." or "..",
// so a name is always safe as a file name.
func validTopicName(name string) bool {
	if name == "" || len(name) > MaxTopicNameLen || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !topicChar(name[i]) {
			return false
		}
	}
	return true
}

func topicChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// createTopic: Topic, Bits (0 = DefaultBits), Ranges (0 = 1), Owner,
// Quota. The initial ranges are equal buddy blocks tiling the keyspace, ids
// ascending by Start.
func (s *State) createTopic(c *Command) Result {
	if !validTopicName(c.Topic) {
		return failed(ErrInvalidTopicName)
	}
	if len(c.Owner) > MaxNameLen {
		return failed(ErrInvalidCommand)
	}
	bits := c.Bits
	if bits == 0 {
		bits = DefaultBits
	}
	if bits > MaxBits {
		return failed(ErrInvalidKeyspaceBits)
	}
	n := c.Ranges
	if n == 0 {
		n = 1
	}
	if n < 0 || n > MaxInitialRanges || !isPow2(uint64(n)) || uint64(n) > keyspaceSize(bits) {
		return failed(ErrInvalidRangeCount)
	}
	if c.ReplicationFactor < 0 || c.ReplicationFactor > MaxReplicas {
		return failed(ErrInvalidCommand)
	}
	if c.Policy != "" && !validName(c.Policy) {
		return failed(ErrInvalidPolicy)
	}
	if _, ok := s.byName[c.Topic]; ok {
		return failed(ErrAlreadyExists)
	}
	if err := s.createAllowed(c, n); err != "" {
		return failed(err)
	}
	tr := &topicRec{
		t: Topic{ID: s.newTopicID(), Name: c.Topic, Bits: bits, CreatedAt: c.Now, Owner: c.Owner,
			Replicas: c.ReplicationFactor, Policy: c.Policy},
		groups: make(map[string][]GroupEntry),
		skips:  make(map[string]skipCount),
	}
	s.charge(tr.t.Owner, usage{topics: 1})
	s.topics[tr.t.ID] = tr
	s.byName[tr.t.Name] = tr
	size := keyspaceSize(bits) / uint64(n)
	ids := make([]uint64, 0, n)
	for i := range uint64(n) {
		rr := s.addRange(tr, Range{
			ID: s.newRangeID(), Topic: tr.t.ID, Start: i * size, End: (i + 1) * size,
			Active: true, CreatedAt: c.Now,
		})
		tr.active = append(tr.active, rr)
		ids = append(ids, rr.r.ID)
	}
	return Result{TopicID: tr.t.ID, RangeIDs: ids}
}

// deleteTopic: Topic. Removes the topic, its ranges, segments (active ones
// too) and group offsets; Result.Deleted lists the freed segments ascending
// so the caller can remove their files.
func (s *State) deleteTopic(c *Command) Result {
	tr, ok := s.byName[c.Topic]
	if !ok || (c.TopicID != 0 && tr.t.ID != c.TopicID) {
		return failed(ErrNoSuchTopic)
	}
	var freed []uint64
	for _, id := range tr.t.Ranges {
		for _, seg := range s.ranges[id].segs {
			freed = append(freed, seg.ID)
			delete(s.segments, seg.ID)
		}
		delete(s.ranges, id)
	}
	delete(s.topics, tr.t.ID)
	delete(s.byName, tr.t.Name)
	s.charge(tr.t.Owner, usage{topics: -1, ranges: -len(tr.t.Ranges)})
	slices.Sort(freed)
	s.deleted.add(freed...)
	return Result{TopicID: tr.t.ID, Deleted: freed}
}
