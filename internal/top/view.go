package top

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Node is one node top scrapes: its name (the node id, or the address
// when the cluster's membership is not known) and its liveness as the
// cluster reports it ("" when not known).
type Node struct {
	Name     string
	Addr     string
	Liveness string
}

// Round is one scrape of every node, in the order of the nodes, started
// at At.
type Round struct {
	At      time.Time
	Scrapes []Scrape
}

// Options bound what a view shows. Zero values take the defaults.
type Options struct {
	// MaxTopics and MaxGroups are how many topics and groups are shown
	// (the busiest topics, the groups furthest behind).
	MaxTopics int
	MaxGroups int
	// TopicWindow is how far back topic rates look: a node refreshes its
	// per-topic gauges at most every 5 seconds, so two scrapes a second
	// apart would mostly see no change and then a jump.
	TopicWindow time.Duration
}

// Defaults of Options.
const (
	DefaultMaxTopics   = 20
	DefaultMaxGroups   = 20
	DefaultTopicWindow = 10 * time.Second
)

func (o Options) withDefaults() Options {
	if o.MaxTopics <= 0 {
		o.MaxTopics = DefaultMaxTopics
	}
	if o.MaxGroups <= 0 {
		o.MaxGroups = DefaultMaxGroups
	}
	if o.TopicWindow <= 0 {
		o.TopicWindow = DefaultTopicWindow
	}
	return o
}

// View is what one refresh shows. Figures that cannot be known (a first
// scrape has no rate, a node older than a series lacks it, a node down
// has nothing) are NaN, shown "-" and encoded null.
type View struct {
	At           time.Time   `json:"at"`
	Interval     Num         `json:"interval_seconds"`
	Totals       Totals      `json:"totals"`
	Nodes        []NodeView  `json:"nodes"`
	Topics       []TopicView `json:"topics"`
	TopicsHidden int         `json:"topics_hidden"`
	Groups       []GroupView `json:"groups"`
	GroupsHidden int         `json:"groups_hidden"`
}

// Totals are the cluster's figures: sums over the nodes that answered.
type Totals struct {
	Nodes           int `json:"nodes"`
	NodesUp         int `json:"nodes_up"`
	ProduceRecords  Num `json:"produce_records_per_second"`
	ProduceBytes    Num `json:"produce_bytes_per_second"`
	FetchRecords    Num `json:"fetch_records_per_second"`
	Connections     Num `json:"connections"`
	UnderReplicated Num `json:"under_replicated_segments"`
	Healing         Num `json:"healing_segments"`
	Damaged         Num `json:"damaged_copies"`
	Topics          int `json:"topics"`
	Groups          int `json:"groups"`
	MaxLagSeconds   Num `json:"max_lag_seconds"`
}

// NodeView is one node's line.
type NodeView struct {
	Name            string `json:"name"`
	Addr            string `json:"addr"`
	Liveness        string `json:"liveness,omitempty"`
	Up              bool   `json:"up"`
	Error           string `json:"error,omitempty"`
	Disk            string `json:"disk,omitempty"`
	ProduceRecords  Num    `json:"produce_records_per_second"`
	ProduceBytes    Num    `json:"produce_bytes_per_second"`
	FetchRecords    Num    `json:"fetch_records_per_second"`
	ProduceP99      Num    `json:"produce_p99_seconds"`
	FsyncP99        Num    `json:"fsync_p99_seconds"`
	Connections     Num    `json:"connections"`
	GroupsLed       Num    `json:"raft_groups_led"`
	UnderReplicated Num    `json:"under_replicated_segments"`
	Healing         Num    `json:"healing_segments"`
	Damaged         Num    `json:"damaged_copies"`
}

// TopicView is one topic's line. The rates are those of the records and
// bytes it stores, over up to Options.TopicWindow: retention deleting
// while producers write shows as less than was written.
type TopicView struct {
	Name          string `json:"name"`
	RecordsIn     Num    `json:"records_in_per_second"`
	BytesIn       Num    `json:"bytes_in_per_second"`
	Records       Num    `json:"records"`
	Bytes         Num    `json:"bytes"`
	Ranges        Num    `json:"ranges"`
	GroupsLagging int    `json:"groups_lagging"`
}

// GroupView is one consumer group's lag on one topic.
type GroupView struct {
	Topic      string `json:"topic"`
	Group      string `json:"group"`
	LagRecords Num    `json:"lag_records"`
	LagSeconds Num    `json:"lag_seconds"`
}

// Build works out the view of the newest round of history (oldest
// first; each round holds one scrape per node, in the order of nodes).
// Node rates come from the last two rounds, topic rates from the newest
// round at least TopicWindow older than the last (or the oldest held).
func Build(nodes []Node, history []Round, opts Options) View {
	opts = opts.withDefaults()
	v := View{Interval: NaN}
	if len(history) == 0 {
		return v
	}
	cur := history[len(history)-1]
	v.At = cur.At
	var prev *Round
	if len(history) > 1 {
		prev = &history[len(history)-2]
		v.Interval = Num(cur.At.Sub(prev.At).Seconds())
	}
	v.Nodes = make([]NodeView, 0, len(nodes))
	for i, n := range nodes {
		var p *Scrape
		if prev != nil && i < len(prev.Scrapes) {
			p = &prev.Scrapes[i]
		}
		var c Scrape
		if i < len(cur.Scrapes) {
			c = cur.Scrapes[i]
		} else {
			c = Scrape{At: cur.At, Err: "not scraped"}
		}
		v.Nodes = append(v.Nodes, nodeView(n, p, c))
	}
	v.Totals = totals(v.Nodes)
	base := topicBase(history, opts.TopicWindow)
	v.topics(merged(cur), merged(base), cur.At.Sub(base.At), opts.MaxTopics)
	v.groups(cur, opts.MaxGroups)
	return v
}

func nodeView(n Node, p *Scrape, c Scrape) NodeView {
	nv := NodeView{Name: n.Name, Addr: n.Addr, Liveness: n.Liveness, Up: c.Err == "", Error: c.Err, Disk: c.Disk}
	nv.ProduceRecords, nv.ProduceBytes, nv.FetchRecords = NaN, NaN, NaN
	nv.ProduceP99, nv.FsyncP99 = NaN, NaN
	gauge := func(name string) Num {
		if v, ok := c.Values[name]; ok {
			return Num(v)
		}
		return NaN
	}
	nv.Connections = gauge(seriesConnections)
	nv.GroupsLed = gauge(seriesGroupsLed)
	nv.UnderReplicated = gauge(seriesUnderReplicated)
	nv.Healing = gauge(seriesHealing)
	nv.Damaged = gauge(seriesDamaged)
	if p == nil || p.Err != "" || c.Err != "" {
		return nv
	}
	dt := c.At.Sub(p.At)
	if restarted(*p, c) {
		// A node restarted between the scrapes: its counters began again
		// at 0 and the earlier figures are no base.
		p = &Scrape{At: p.At}
	}
	nv.ProduceRecords = Num(Rate(p.Values, c.Values, seriesRecordsProduced, dt))
	nv.ProduceBytes = Num(Rate(p.Values, c.Values, seriesBytesProduced, dt))
	nv.FetchRecords = Num(Rate(p.Values, c.Values, seriesRecordsConsumed, dt))
	nv.ProduceP99 = Num(histQuantile(0.99, p.Histograms, c.Histograms, seriesProduceLatency))
	nv.FsyncP99 = Num(histQuantile(0.99, p.Histograms, c.Histograms, seriesFsyncLatency))
	return nv
}

// restarted reports whether the node's uptime went back between the
// scrapes.
func restarted(p, c Scrape) bool {
	pu, ok1 := p.Values[seriesUptime]
	cu, ok2 := c.Values[seriesUptime]
	return ok1 && ok2 && cu < pu
}

// Rate is the per-second increase of counter name between two scrapes
// dt apart: NaN when either lacks it or dt is not positive. A counter
// that went down was reset (the node restarted), so all of its current
// value is the increase.
func Rate(prev, cur map[string]float64, name string, dt time.Duration) float64 {
	p, ok1 := prev[name]
	c, ok2 := cur[name]
	if prev == nil {
		p, ok1 = 0, true // a reset scrape: counting from 0
	}
	if !ok1 || !ok2 || dt <= 0 {
		return math.NaN()
	}
	d := c - p
	if d < 0 {
		d = c
	}
	return d / dt.Seconds()
}

func histQuantile(q float64, prev, cur map[string]Histogram, name string) float64 {
	c, ok := cur[name]
	if !ok {
		return math.NaN()
	}
	p, ok := prev[name]
	if !ok && prev != nil {
		return math.NaN()
	}
	return Quantile(q, p, c)
}

// Quantile is the q-quantile of the observations cur holds and prev did
// not, interpolated linearly within a bucket as Prometheus's
// histogram_quantile does; one in the +Inf bucket is the highest finite
// bound. It is NaN when there were no observations. A histogram whose
// count went down, or whose buckets changed, was reset: all of cur is
// new.
func Quantile(q float64, prev, cur Histogram) float64 {
	if reset(prev, cur) {
		prev = Histogram{}
	}
	total := cur.Count - prev.Count
	if total <= 0 || len(cur.Buckets) == 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, b := range cur.Buckets {
		n := b.Count
		if len(prev.Buckets) > 0 {
			n -= prev.Buckets[i].Count
		}
		if n >= rank {
			if n == below {
				return b.Le
			}
			return lower + (b.Le-lower)*(rank-below)/(n-below)
		}
		lower, below = b.Le, n
	}
	return cur.Buckets[len(cur.Buckets)-1].Le
}

func reset(prev, cur Histogram) bool {
	if cur.Count < prev.Count {
		return true
	}
	if len(prev.Buckets) == 0 {
		return false
	}
	if len(prev.Buckets) != len(cur.Buckets) {
		return true
	}
	for i, b := range prev.Buckets {
		if b.Le != cur.Buckets[i].Le || cur.Buckets[i].Count < b.Count {
			return true
		}
	}
	return false
}

func totals(nodes []NodeView) Totals {
	t := Totals{Nodes: len(nodes)}
	t.ProduceRecords, t.ProduceBytes, t.FetchRecords = NaN, NaN, NaN
	t.Connections, t.UnderReplicated, t.Healing, t.Damaged = NaN, NaN, NaN, NaN
	t.MaxLagSeconds = NaN
	for _, n := range nodes {
		if n.Up {
			t.NodesUp++
		}
		t.ProduceRecords = t.ProduceRecords.add(n.ProduceRecords)
		t.ProduceBytes = t.ProduceBytes.add(n.ProduceBytes)
		t.FetchRecords = t.FetchRecords.add(n.FetchRecords)
		t.Connections = t.Connections.add(n.Connections)
		t.UnderReplicated = t.UnderReplicated.add(n.UnderReplicated)
		t.Healing = t.Healing.add(n.Healing)
		t.Damaged = t.Damaged.add(n.Damaged)
	}
	return t
}

// topicBase is the newest round at least window older than the last,
// else the oldest held.
func topicBase(history []Round, window time.Duration) Round {
	last := history[len(history)-1].At
	for i := len(history) - 2; i >= 0; i-- {
		if last.Sub(history[i].At) >= window {
			return history[i]
		}
	}
	return history[0]
}

// merged is every topic the round's nodes report. Each topic is reported
// by the node leading its metadata; while leadership moves, two may
// report it, and the larger figures are the newer.
func merged(r Round) map[string]TopicFigures {
	out := map[string]TopicFigures{}
	for _, s := range r.Scrapes {
		for name, t := range s.Topics {
			o, ok := out[name]
			if !ok {
				out[name] = t
				continue
			}
			out[name] = TopicFigures{Ranges: max(o.Ranges, t.Ranges), Bytes: max(o.Bytes, t.Bytes), Records: max(o.Records, t.Records)}
		}
	}
	return out
}

func (v *View) topics(cur, base map[string]TopicFigures, dt time.Duration, limit int) {
	v.Totals.Topics = len(cur)
	all := make([]TopicView, 0, len(cur))
	for name, t := range cur {
		tv := TopicView{Name: name, RecordsIn: NaN, BytesIn: NaN, Records: Num(t.Records), Bytes: Num(t.Bytes), Ranges: Num(t.Ranges)}
		if b, ok := base[name]; ok && dt > 0 {
			// Retention deletes as producers write: a fall is no negative
			// rate.
			tv.RecordsIn = Num(max(0, t.Records-b.Records) / dt.Seconds())
			tv.BytesIn = Num(max(0, t.Bytes-b.Bytes) / dt.Seconds())
		}
		all = append(all, tv)
	}
	slices.SortFunc(all, func(a, b TopicView) int {
		return cmp.Or(-cmp.Compare(a.RecordsIn.key(), b.RecordsIn.key()), -cmp.Compare(a.Bytes.key(), b.Bytes.key()), cmp.Compare(a.Name, b.Name))
	})
	if len(all) > limit {
		v.TopicsHidden = len(all) - limit
		all = all[:limit]
	}
	v.Topics = all
}

func (v *View) groups(cur Round, limit int) {
	seen := map[GroupKey]Lag{}
	for _, s := range cur.Scrapes {
		for k, l := range s.Lags {
			if o, ok := seen[k]; !ok || l.Records > o.Records {
				seen[k] = l
			}
		}
	}
	v.Totals.Groups = len(seen)
	all := make([]GroupView, 0, len(seen))
	for k, l := range seen {
		all = append(all, GroupView{Topic: k.Topic, Group: k.Group, LagRecords: Num(l.Records), LagSeconds: Num(l.Seconds)})
		v.Totals.MaxLagSeconds = v.Totals.MaxLagSeconds.maxOf(Num(l.Seconds))
	}
	lagging := map[string]int{}
	for _, g := range all {
		if g.LagRecords > 0 {
			lagging[g.Topic]++
		}
	}
	for i := range v.Topics {
		v.Topics[i].GroupsLagging = lagging[v.Topics[i].Name]
	}
	slices.SortFunc(all, func(a, b GroupView) int {
		return cmp.Or(-cmp.Compare(a.LagSeconds.key(), b.LagSeconds.key()), -cmp.Compare(a.LagRecords.key(), b.LagRecords.key()),
			cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Group, b.Group))
	})
	if len(all) > limit {
		v.GroupsHidden = len(all) - limit
		all = all[:limit]
	}
	v.Groups = all
}
