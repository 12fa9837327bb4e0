package top

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// page is a recorded /metrics text of a node, with the figures the
// tests vary.
type page struct {
	uptime            float64
	produced, bytes   float64
	consumed          float64
	produceBuckets    [4]float64 // cumulative: le 0.001, 0.01, 0.1, +Inf
	fsyncCount        float64
	conns             float64
	raft              bool // a cluster node: raft and repair series
	led, under, heal  float64
	disk              string
	topics            map[string][3]float64 // ranges, bytes, records
	lags              map[[2]string][2]float64
	lagUnknownSeconds [][2]string
}

func (p page) text() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# HELP malachi_up 1 while the node answers scrapes.")
	w("# TYPE malachi_up gauge")
	w("malachi_up 1")
	w("# TYPE malachi_uptime_seconds gauge")
	w("malachi_uptime_seconds %g", p.uptime)
	w("# TYPE malachi_records_produced_total counter")
	w("malachi_records_produced_total %g", p.produced)
	w("# TYPE malachi_bytes_produced_total counter")
	w("malachi_bytes_produced_total %g", p.bytes)
	w("# TYPE malachi_records_consumed_total counter")
	w("malachi_records_consumed_total %g", p.consumed)
	w("# TYPE malachi_produce_latency_seconds histogram")
	for i, le := range []string{"0.001", "0.01", "0.1", "+Inf"} {
		w(`malachi_produce_latency_seconds_bucket{le="%s"} %g`, le, p.produceBuckets[i])
	}
	w("malachi_produce_latency_seconds_sum 1.5")
	w("malachi_produce_latency_seconds_count %g", p.produceBuckets[3])
	w("# TYPE malachi_storage_fsync_latency_seconds histogram")
	w(`malachi_storage_fsync_latency_seconds_bucket{le="0.002"} %g`, p.fsyncCount)
	w(`malachi_storage_fsync_latency_seconds_bucket{le="+Inf"} %g`, p.fsyncCount)
	w("malachi_storage_fsync_latency_seconds_sum 0.1")
	w("malachi_storage_fsync_latency_seconds_count %g", p.fsyncCount)
	w("# TYPE malachi_connections_open gauge")
	w("malachi_connections_open %g", p.conns)
	w("# TYPE malachi_storage_disk_state gauge")
	for _, st := range []string{"ok", "full", "failing"} {
		v := 0
		if st == p.disk {
			v = 1
		}
		w(`malachi_storage_disk_state{state="%s"} %d`, st, v)
	}
	if p.raft {
		w("# TYPE malachi_raft_groups_led gauge")
		w("malachi_raft_groups_led %g", p.led)
		w("# TYPE malachi_under_replicated_segments gauge")
		w("malachi_under_replicated_segments %g", p.under)
		w("# TYPE malachi_healing_segments gauge")
		w("malachi_healing_segments %g", p.heal)
		w("# TYPE malachi_damaged_copies gauge")
		w("malachi_damaged_copies 0")
	}
	for _, s := range []struct {
		name string
		i    int
	}{{"malachi_topic_ranges", 0}, {"malachi_topic_bytes", 1}, {"malachi_topic_records", 2}} {
		w("# TYPE %s gauge", s.name)
		for topic, f := range p.topics {
			w(`%s{topic="%s"} %g`, s.name, topic, f[s.i])
		}
	}
	w("# TYPE malachi_consumer_group_lag_records gauge")
	for k, l := range p.lags {
		w(`malachi_consumer_group_lag_records{group="%s",topic="%s"} %g`, k[1], k[0], l[0])
	}
	w("# TYPE malachi_consumer_group_lag_seconds gauge")
	for k, l := range p.lags {
		unknown := false
		for _, u := range p.lagUnknownSeconds {
			unknown = unknown || u == k
		}
		if !unknown {
			w(`malachi_consumer_group_lag_seconds{group="%s",topic="%s"} %g`, k[1], k[0], l[1])
		}
	}
	return b.String()
}

func parse(t *testing.T, p page, at time.Time) Scrape {
	t.Helper()
	s, err := Parse(strings.NewReader(p.text()), at)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func near(got Num, want float64) bool {
	return got.Known() && math.Abs(float64(got)-want) < 1e-9*math.Max(1, math.Abs(want))
}

var oneNode = []Node{{Name: "1", Addr: "10.0.0.1:4041", Liveness: "alive"}}

func TestRatesFromTwoScrapes(t *testing.T) {
	a := page{uptime: 100, produced: 1000, bytes: 1e6, consumed: 10, produceBuckets: [4]float64{5, 10, 10, 10}, fsyncCount: 3, conns: 2, disk: "ok"}
	b := a
	b.uptime, b.produced, b.bytes, b.consumed = 102, 5000, 9e6, 410
	b.produceBuckets = [4]float64{5, 10, 110, 110} // 100 new, all in (0.01, 0.1]
	b.fsyncCount = 3                               // none new
	v := Build(oneNode, []Round{
		{At: t0, Scrapes: []Scrape{parse(t, a, t0)}},
		{At: t0.Add(2 * time.Second), Scrapes: []Scrape{parse(t, b, t0.Add(2*time.Second))}},
	}, Options{})
	n := v.Nodes[0]
	if !near(n.ProduceRecords, 2000) || !near(n.ProduceBytes, 4e6) || !near(n.FetchRecords, 200) {
		t.Errorf("rates: produce %v rec/s %v B/s, fetch %v rec/s; want 2000, 4e6, 200", n.ProduceRecords, n.ProduceBytes, n.FetchRecords)
	}
	// histogram_quantile: 99th of 100 in (0.01, 0.1] is 0.01 + 0.09*0.99.
	if !near(n.ProduceP99, 0.01+0.09*0.99) {
		t.Errorf("produce p99 %v, want %v", n.ProduceP99, 0.01+0.09*0.99)
	}
	if n.FsyncP99.Known() {
		t.Errorf("fsync p99 %v with no fsync in the interval; want unknown", n.FsyncP99)
	}
	if !near(v.Totals.ProduceRecords, 2000) || v.Totals.NodesUp != 1 || n.Disk != "ok" || !near(n.Connections, 2) {
		t.Errorf("totals %+v, node %+v", v.Totals, n)
	}
	if !near(v.Interval, 2) {
		t.Errorf("interval %v", v.Interval)
	}
}

func TestFirstScrapeHasNoRates(t *testing.T) {
	a := page{uptime: 1, produced: 1000, disk: "ok"}
	v := Build(oneNode, []Round{{At: t0, Scrapes: []Scrape{parse(t, a, t0)}}}, Options{})
	if v.Nodes[0].ProduceRecords.Known() || v.Totals.ProduceRecords.Known() || v.Interval.Known() {
		t.Fatalf("a single scrape gave rates: %+v", v.Nodes[0])
	}
	var out bytes.Buffer
	if err := WriteText(&out, v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "rates need a second scrape") {
		t.Errorf("text does not say rates need a second scrape:\n%s", out.String())
	}
}

func TestCounterReset(t *testing.T) {
	a := page{uptime: 100, produced: 5000, consumed: 700, produceBuckets: [4]float64{0, 50, 50, 50}}
	b := page{uptime: 102, produced: 200, consumed: 900, produceBuckets: [4]float64{10, 10, 10, 10}}
	v := Build(oneNode, []Round{
		{At: t0, Scrapes: []Scrape{parse(t, a, t0)}},
		{At: t0.Add(2 * time.Second), Scrapes: []Scrape{parse(t, b, t0.Add(2*time.Second))}},
	}, Options{})
	n := v.Nodes[0]
	// produced went down: reset, all 200 are new; consumed went on.
	if !near(n.ProduceRecords, 100) || !near(n.FetchRecords, 100) {
		t.Errorf("after a reset: produce %v, fetch %v rec/s; want 100, 100", n.ProduceRecords, n.FetchRecords)
	}
	// The histogram's count fell: its 10 observations are all new, all
	// at most 1 ms.
	if !n.ProduceP99.Known() || n.ProduceP99 > 0.001 {
		t.Errorf("p99 after a histogram reset %v, want within the first bucket", n.ProduceP99)
	}
}

func TestRestartSeenByUptime(t *testing.T) {
	// The node restarted and produced more than before between scrapes:
	// no counter went down, but its uptime did.
	a := page{uptime: 500, produced: 100}
	b := page{uptime: 1, produced: 300}
	v := Build(oneNode, []Round{
		{At: t0, Scrapes: []Scrape{parse(t, a, t0)}},
		{At: t0.Add(time.Second), Scrapes: []Scrape{parse(t, b, t0.Add(time.Second))}},
	}, Options{})
	if !near(v.Nodes[0].ProduceRecords, 300) {
		t.Errorf("produce %v rec/s after a restart, want 300", v.Nodes[0].ProduceRecords)
	}
}

func TestQuantile(t *testing.T) {
	h := func(count float64, cum ...float64) Histogram {
		out := Histogram{Count: count}
		for i, c := range cum {
			out.Buckets = append(out.Buckets, Bucket{Le: []float64{0.001, 0.01, 0.1}[i], Count: c})
		}
		return out
	}
	for _, c := range []struct {
		name       string
		q          float64
		prev, cur  Histogram
		want       float64
		wantsKnown bool
	}{
		{"within the first bucket", 0.5, Histogram{}, h(10, 10, 10, 10), 0.0005, true},
		{"differences only", 0.5, h(100, 100, 100, 100), h(110, 100, 110, 110), 0.0055, true},
		{"past the last bound", 0.99, Histogram{}, h(100, 0, 0, 50), 0.1, true},
		{"nothing new", 0.99, h(5, 5, 5, 5), h(5, 5, 5, 5), 0, false},
		{"buckets changed", 0.5, h(100, 100, 100, 100), Histogram{Count: 10, Buckets: []Bucket{{Le: 1, Count: 10}}}, 0.5, true},
	} {
		got := Quantile(c.q, c.prev, c.cur)
		if !c.wantsKnown {
			if !math.IsNaN(got) {
				t.Errorf("%s: %v, want unknown", c.name, got)
			}
			continue
		}
		if math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMissingSeriesAreUnknown(t *testing.T) {
	// A single node exports no raft or repair series: unknown, not 0.
	a := page{uptime: 1, disk: "ok"}
	v := Build(oneNode, []Round{{At: t0, Scrapes: []Scrape{parse(t, a, t0)}}}, Options{})
	n := v.Nodes[0]
	if n.GroupsLed.Known() || n.UnderReplicated.Known() || n.Healing.Known() {
		t.Errorf("missing series given values: %+v", n)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"raft_groups_led":null`) {
		t.Errorf("JSON does not say null for a missing series: %s", b)
	}
	c := page{uptime: 1, disk: "ok", raft: true, led: 3, under: 2}
	v = Build(oneNode, []Round{{At: t0, Scrapes: []Scrape{parse(t, c, t0)}}}, Options{})
	if !near(v.Nodes[0].GroupsLed, 3) || !near(v.Totals.UnderReplicated, 2) || !near(v.Nodes[0].Healing, 0) {
		t.Errorf("cluster series: %+v, totals %+v", v.Nodes[0], v.Totals)
	}
}

func TestNodeDown(t *testing.T) {
	nodes := []Node{{Name: "1", Addr: "a:4041", Liveness: "alive"}, {Name: "2", Addr: "b:4041", Liveness: "dead"}}
	up0 := page{uptime: 10, produced: 0, raft: true, under: 4}
	up1 := page{uptime: 11, produced: 50, raft: true, under: 4}
	down := Failed(t0, errors.New("connection refused"))
	v := Build(nodes, []Round{
		{At: t0, Scrapes: []Scrape{parse(t, up0, t0), parse(t, up0, t0)}},
		{At: t0.Add(time.Second), Scrapes: []Scrape{parse(t, up1, t0.Add(time.Second)), down}},
	}, Options{})
	if v.Totals.NodesUp != 1 || v.Totals.Nodes != 2 || v.Nodes[1].Up || v.Nodes[1].ProduceRecords.Known() {
		t.Fatalf("node down: totals %+v, node %+v", v.Totals, v.Nodes[1])
	}
	if !near(v.Totals.ProduceRecords, 50) || !near(v.Totals.UnderReplicated, 4) {
		t.Errorf("totals over the nodes up: %+v", v.Totals)
	}
	var out bytes.Buffer
	if err := WriteText(&out, v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "down") || !strings.Contains(out.String(), "node 2 (b:4041): connection refused") {
		t.Errorf("text does not show the node down:\n%s", out.String())
	}
}

func TestTopicsAndGroups(t *testing.T) {
	nodes := []Node{{Name: "1"}, {Name: "2"}}
	// Each node reports the topics whose metadata it leads.
	n1 := func(records float64) page {
		return page{topics: map[string][3]float64{"orders": {4, records * 10, records}, "idle": {1, 100, 10}},
			lags: map[[2]string][2]float64{{"orders", "billing"}: {500, 30}, {"orders", "audit"}: {20, 90}}}
	}
	n2 := func(records float64) page {
		return page{topics: map[string][3]float64{"clicks": {2, records, records}},
			lags:              map[[2]string][2]float64{{"clicks", "web"}: {7, 0}, {"clicks", "new"}: {9000, 0}},
			lagUnknownSeconds: [][2]string{{"clicks", "new"}}}
	}
	var history []Round
	for i, recs := range []float64{1000, 1500, 3000} {
		at := t0.Add(time.Duration(i) * 5 * time.Second)
		history = append(history, Round{At: at, Scrapes: []Scrape{parse(t, n1(recs), at), parse(t, n2(recs/10), at)}})
	}
	v := Build(nodes, history, Options{MaxTopics: 2, MaxGroups: 3})
	// Over the 10-second window: orders 1000 -> 3000 records.
	if len(v.Topics) != 2 || v.Topics[0].Name != "orders" || !near(v.Topics[0].RecordsIn, 200) || !near(v.Topics[0].BytesIn, 2000) {
		t.Fatalf("topics %+v", v.Topics)
	}
	if v.Topics[1].Name != "clicks" || !near(v.Topics[1].RecordsIn, 20) || v.TopicsHidden != 1 || v.Totals.Topics != 3 {
		t.Errorf("second topic %+v, hidden %d, total %d", v.Topics[1], v.TopicsHidden, v.Totals.Topics)
	}
	if v.Topics[0].GroupsLagging != 2 || !near(v.Topics[0].Ranges, 4) {
		t.Errorf("orders: %+v", v.Topics[0])
	}
	// Worst first: by seconds behind, then records; an undated lag last.
	var got []string
	for _, g := range v.Groups {
		got = append(got, g.Topic+"/"+g.Group)
	}
	if strings.Join(got, " ") != "orders/audit orders/billing clicks/web" || v.GroupsHidden != 1 || v.Totals.Groups != 4 {
		t.Errorf("groups %v (hidden %d, total %d)", got, v.GroupsHidden, v.Totals.Groups)
	}
	if !near(v.Totals.MaxLagSeconds, 90) {
		t.Errorf("max lag %v", v.Totals.MaxLagSeconds)
	}
	// A topic's records falling (retention) is no negative rate.
	history = append(history, Round{At: t0.Add(20 * time.Second), Scrapes: []Scrape{parse(t, n1(100), t0.Add(20*time.Second)), parse(t, n2(300), t0.Add(20*time.Second))}})
	v = Build(nodes, history, Options{})
	for _, tp := range v.Topics {
		if tp.Name == "orders" && !near(tp.RecordsIn, 0) {
			t.Errorf("orders after retention: %v rec/s", tp.RecordsIn)
		}
	}
}

func TestParseRefusesTooLargeAPage(t *testing.T) {
	comment := strings.Repeat("# a comment line of the page, repeated\n", 1024)
	r := io.MultiReader(strings.NewReader("malachi_up 1\n"), &repeat{s: comment, n: MaxScrapeBytes/len(comment) + 2})
	if _, err := Parse(r, t0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a page past %d bytes: %v", MaxScrapeBytes, err)
	}
	if _, err := Parse(strings.NewReader("malachi_up{\n"), t0); err == nil {
		t.Fatal("a broken page parsed")
	}
}

type repeat struct {
	s   string
	n   int
	off int
}

func (r *repeat) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	c := copy(p, r.s[r.off:])
	r.off += c
	if r.off == len(r.s) {
		r.off, r.n = 0, r.n-1
	}
	return c, nil
}

func TestTextQuotesControlCharacters(t *testing.T) {
	a := page{topics: map[string][3]float64{"evil\x1b[2J": {1, 1, 1}}}
	v := Build(oneNode, []Round{{At: t0, Scrapes: []Scrape{parse(t, a, t0)}}}, Options{})
	var out bytes.Buffer
	if err := WriteText(&out, v); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "\x1b") || !strings.Contains(out.String(), `"evil\x1b[2J"`) {
		t.Errorf("a topic name's escape reached the terminal:\n%q", out.String())
	}
}

// TestSeriesNamesExist: every series the view reads is one the node
// defines (internal/metrics names them with desc("name", ...)), so a
// renamed series fails here rather than showing "-" forever.
func TestSeriesNamesExist(t *testing.T) {
	src, err := os.ReadFile("../metrics/descs.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{seriesRecordsProduced, seriesBytesProduced, seriesRecordsConsumed, seriesBytesConsumed,
		seriesProduceLatency, seriesFsyncLatency, seriesConnections, seriesGroupsLed, seriesUnderReplicated, seriesHealing,
		seriesDamaged, seriesDiskState, seriesTopicRanges, seriesTopicBytes, seriesTopicRecords, seriesLagRecords,
		seriesLagSeconds, seriesUptime} {
		short, ok := strings.CutPrefix(name, "malachi_")
		if !ok || !strings.Contains(string(src), `desc("`+short+`"`) {
			t.Errorf("internal/metrics defines no series %s", name)
		}
	}
}
