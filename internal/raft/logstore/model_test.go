package logstore

// The model: raft.MemoryStorage per group, driven by the same operations
// as the store, and a renderer that prints everything a raft.Storage
// answers so that a store and a model compare as text.

import (
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

type opKind uint8

const (
	opSave opKind = iota
	opCompact
	opSnapshot
	opRemove
)

// op is one write to the store.
type op struct {
	kind    opKind
	updates []Update
	group   uint64
	index   uint64
	snap    *pb.Snapshot
}

func (o op) String() string {
	switch o.kind {
	case opSave:
		var parts []string
		for _, u := range o.updates {
			p := fmt.Sprintf("g%d", u.Group)
			if u.Snapshot != nil {
				p += fmt.Sprintf(" snap@%d", u.Snapshot.GetMetadata().GetIndex())
			}
			if len(u.Entries) > 0 {
				p += fmt.Sprintf(" ents[%d..%d]", u.Entries[0].GetIndex(), u.Entries[len(u.Entries)-1].GetIndex())
			}
			if u.HardState != nil {
				p += fmt.Sprintf(" hs(%d,%d,%d)", u.HardState.GetTerm(), u.HardState.GetVote(), u.HardState.GetCommit())
			}
			parts = append(parts, p)
		}
		return "save{" + strings.Join(parts, "; ") + "}"
	case opCompact:
		return fmt.Sprintf("compact(g%d, %d)", o.group, o.index)
	case opSnapshot:
		return fmt.Sprintf("setsnapshot(g%d, %d)", o.group, o.snap.GetMetadata().GetIndex())
	default:
		return fmt.Sprintf("remove(g%d)", o.group)
	}
}

func (o op) run(s *Store) error {
	switch o.kind {
	case opSave:
		return s.Save(o.updates)
	case opCompact:
		return s.Compact(o.group, o.index)
	case opSnapshot:
		return s.SetSnapshot(o.group, o.snap)
	default:
		return s.RemoveGroup(o.group)
	}
}

// model is the expected state: one MemoryStorage per group.
type model map[uint64]*raft.MemoryStorage

func (m model) group(id uint64) *raft.MemoryStorage {
	ms, ok := m[id]
	if !ok {
		ms = raft.NewMemoryStorage()
		m[id] = ms
	}
	return ms
}

// apply runs o on the model and returns the error MemoryStorage gives.
// A refused op leaves the model unchanged: the generator only makes
// refused Saves of a single update whose snapshot is refused first.
func (m model) apply(o op) error {
	switch o.kind {
	case opSave:
		for _, u := range o.updates {
			if u.Snapshot == nil && len(u.Entries) == 0 && u.HardState == nil {
				continue
			}
			_, existed := m[u.Group]
			ms := m.group(u.Group)
			if u.Snapshot != nil {
				if err := ms.ApplySnapshot(u.Snapshot); err != nil {
					if !existed {
						delete(m, u.Group)
					}
					return err
				}
			}
			if err := ms.Append(u.Entries); err != nil {
				return err
			}
			if u.HardState != nil {
				if err := ms.SetHardState(proto.Clone(u.HardState).(*pb.HardState)); err != nil {
					return err
				}
			}
		}
		return nil
	case opCompact:
		ms, ok := m[o.group]
		if !ok {
			return raft.ErrCompacted
		}
		return ms.Compact(o.index)
	case opSnapshot:
		ms, ok := m[o.group]
		if !ok {
			return raft.ErrSnapOutOfDate
		}
		_, err := ms.CreateSnapshot(o.index, o.snap.GetMetadata().GetConfState(), o.snap.GetData())
		return err
	default:
		delete(m, o.group)
		return nil
	}
}

// replayModel rebuilds the model after ops, all of them accepted.
func replayModel(t tb, ops []op) model {
	t.Helper()
	m := model{}
	for i, o := range ops {
		if err := m.apply(o); err != nil {
			t.Fatalf("model refuses accepted op %d %v: %v", i, o, err)
		}
	}
	return m
}

func (m model) render() string {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "group %d\n%s", id, render(m[id]))
	}
	return b.String()
}

func renderStore(s *Store) string {
	var b strings.Builder
	for _, id := range s.Groups() {
		fmt.Fprintf(&b, "group %d\n%s", id, render(s.Storage(id)))
	}
	return b.String()
}

// render prints everything st answers.
func render(st raft.Storage) string {
	var b strings.Builder
	hs, cs, err := st.InitialState()
	if hs == nil {
		fmt.Fprintf(&b, "  hard: none")
	} else {
		fmt.Fprintf(&b, "  hard: term=%d vote=%d commit=%d", hs.GetTerm(), hs.GetVote(), hs.GetCommit())
	}
	fmt.Fprintf(&b, " conf: %s err=%v\n", renderConf(cs), err)
	first, _ := st.FirstIndex()
	last, _ := st.LastIndex()
	fmt.Fprintf(&b, "  first=%d last=%d terms:", first, last)
	for i := first - 1; i <= last; i++ {
		term, err := st.Term(i)
		fmt.Fprintf(&b, " %d", term)
		if err != nil {
			fmt.Fprintf(&b, "(%v)", err)
		}
	}
	ents, err := st.Entries(first, last+1, 1<<40)
	fmt.Fprintf(&b, "\n  entries (err=%v):", err)
	for _, e := range ents {
		fmt.Fprintf(&b, " %d/%d/%d/%s", e.GetIndex(), e.GetTerm(), e.GetType(), digest(e.GetData()))
	}
	snap, err := st.Snapshot()
	md := snap.GetMetadata()
	fmt.Fprintf(&b, "\n  snapshot: index=%d term=%d conf=%s data=%s err=%v\n",
		md.GetIndex(), md.GetTerm(), renderConf(md.GetConfState()), digest(snap.GetData()), err)
	return b.String()
}

// digest prints data short: its length and CRC.
func digest(data []byte) string {
	return fmt.Sprintf("%d:%08x", len(data), crc32.ChecksumIEEE(data))
}

func renderConf(cs *pb.ConfState) string {
	return fmt.Sprintf("v%v l%v vo%v ln%v al=%v", cs.GetVoters(), cs.GetLearners(),
		cs.GetVotersOutgoing(), cs.GetLearnersNext(), cs.GetAutoLeave())
}

// sameRefusal reports whether the store's and the model's errors agree.
func sameRefusal(storeErr, modelErr error) bool {
	if modelErr == nil || storeErr == nil {
		return modelErr == nil && storeErr == nil
	}
	return errors.Is(storeErr, modelErr)
}

// gen makes operations that are valid against the model, and now and
// then one that both must refuse. intn is the source of randomness.
type gen struct {
	intn   func(int) int
	groups int
	// bigEvery makes about one entry in bigEvery large, to drive rotation.
	bigEvery int
}

func (g gen) next(m model) op {
	switch x := g.intn(20); {
	case x < 13:
		return g.save(m)
	case x < 16:
		if o, ok := g.snapshot(m); ok {
			return o
		}
	case x < 18:
		if o, ok := g.compact(m); ok {
			return o
		}
	case x < 19:
		return op{kind: opRemove, group: g.groupID()}
	default:
		if o, ok := g.refused(m); ok {
			return o
		}
	}
	return g.save(m)
}

func (g gen) groupID() uint64 { return uint64(1 + g.intn(g.groups)) }

func (g gen) data(n int) []byte {
	if g.bigEvery > 0 && g.intn(g.bigEvery) == 0 {
		n = 2000 + g.intn(3000)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.intn(256))
	}
	return b
}

func (g gen) save(m model) op {
	seen := map[uint64]bool{}
	var ups []Update
	for range 1 + g.intn(3) {
		id := g.groupID()
		if seen[id] {
			continue
		}
		seen[id] = true
		ups = append(ups, g.update(m, id))
	}
	return op{kind: opSave, updates: ups}
}

func termAt(ms *raft.MemoryStorage, i uint64) uint64 {
	t, _ := ms.Term(i)
	return t
}

func (g gen) update(m model, id uint64) Update {
	u := Update{Group: id}
	ms, ok := m[id]
	if !ok {
		ms = raft.NewMemoryStorage()
	}
	first, _ := ms.FirstIndex()
	last, _ := ms.LastIndex()
	snap, _ := ms.Snapshot()
	if g.intn(10) == 0 {
		idx := max(last, snap.GetMetadata().GetIndex()) + 1 + uint64(g.intn(3))
		u.Snapshot = &pb.Snapshot{Data: g.data(g.intn(40)), Metadata: &pb.SnapshotMetadata{
			Index: proto.Uint64(idx), Term: proto.Uint64(termAt(ms, last) + 1),
			ConfState: &pb.ConfState{Voters: []uint64{1, 2, uint64(1 + g.intn(5))}}}}
		first, last = idx+1, idx
	}
	if g.intn(4) != 0 {
		// Raft never rewrites what a snapshot covers: it is committed.
		first = max(first, snap.GetMetadata().GetIndex()+1)
		start := first + uint64(g.intn(int(last-first+2)))
		term := termAt(ms, start-1)
		if u.Snapshot != nil {
			term = u.Snapshot.GetMetadata().GetTerm()
		}
		term += uint64(g.intn(2))
		for i := range 1 + g.intn(4) {
			u.Entries = append(u.Entries, &pb.Entry{Index: proto.Uint64(start + uint64(i)), Term: proto.Uint64(term),
				Type: pb.EntryType(g.intn(2)).Enum(), Data: g.data(g.intn(30))})
		}
		last = start + uint64(len(u.Entries)) - 1
	}
	if g.intn(2) == 0 || (u.Snapshot == nil && len(u.Entries) == 0) {
		u.HardState = &pb.HardState{Term: proto.Uint64(uint64(1 + g.intn(9))), Vote: proto.Uint64(uint64(g.intn(4))),
			Commit: proto.Uint64(uint64(g.intn(int(last) + 1)))}
	}
	return u
}

func (g gen) existing(m model) (uint64, *raft.MemoryStorage, bool) {
	id := g.groupID()
	ms, ok := m[id]
	return id, ms, ok
}

func (g gen) snapshot(m model) (op, bool) {
	id, ms, ok := g.existing(m)
	if !ok {
		return op{}, false
	}
	last, _ := ms.LastIndex()
	snap, _ := ms.Snapshot()
	si := snap.GetMetadata().GetIndex()
	if last <= si {
		return op{}, false
	}
	idx := si + 1 + uint64(g.intn(int(last-si)))
	s := &pb.Snapshot{Data: g.data(g.intn(50)), Metadata: &pb.SnapshotMetadata{
		Index: proto.Uint64(idx), Term: proto.Uint64(termAt(ms, idx))}}
	if g.intn(2) == 0 {
		s.Metadata.ConfState = &pb.ConfState{Voters: []uint64{uint64(1 + g.intn(5))}, Learners: []uint64{9}}
	}
	return op{kind: opSnapshot, group: id, index: idx, snap: s}, true
}

func (g gen) compact(m model) (op, bool) {
	id, ms, ok := g.existing(m)
	if !ok {
		return op{}, false
	}
	first, _ := ms.FirstIndex()
	snap, _ := ms.Snapshot()
	si := snap.GetMetadata().GetIndex()
	if si < first {
		return op{}, false
	}
	return op{kind: opCompact, group: id, index: first + uint64(g.intn(int(si-first+1)))}, true
}

// refused makes an op that both the store and MemoryStorage refuse.
func (g gen) refused(m model) (op, bool) {
	id, ms, ok := g.existing(m)
	if !ok {
		return op{}, false
	}
	first, _ := ms.FirstIndex()
	snap, _ := ms.Snapshot()
	si := snap.GetMetadata().GetIndex()
	switch {
	case si > 0 && g.intn(2) == 0:
		stale := &pb.Snapshot{Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(si), Term: proto.Uint64(termAt(ms, si))}}
		if g.intn(2) == 0 {
			return op{kind: opSave, updates: []Update{{Group: id, Snapshot: stale}}}, true
		}
		return op{kind: opSnapshot, group: id, index: si, snap: stale}, true
	case first > 1:
		return op{kind: opCompact, group: id, index: first - 1 - uint64(g.intn(int(first-1)))}, true
	}
	return op{}, false
}

// checkAgainst fails unless the store answers exactly as the model does.
func checkAgainst(t tb, s *Store, m model) {
	t.Helper()
	if got, want := renderStore(s), m.render(); got != want {
		t.Fatalf("store differs from model: %s", firstDiff(got, want))
	}
}

// firstDiff shows where two renderings part.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			ctx := ""
			for j := i; j >= 0 && j < len(w); j-- {
				if strings.HasPrefix(w[j], "group") {
					ctx = w[j]
					break
				}
			}
			return fmt.Sprintf("line %d (model's %s):\n  store: %s\n  model: %s", i, ctx, gl, wl)
		}
	}
	return "no difference"
}
