package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestRecorderPercentiles(t *testing.T) {
	r := NewRecorder()
	for v := 1; v <= 10000; v++ {
		r.Record(time.Duration(v) * time.Microsecond)
	}
	s := r.Summary(FromSend)
	if s.Count != 10000 || s.From != FromSend {
		t.Fatalf("count %d from %q", s.Count, s.From)
	}
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"min", s.MinUs, 1}, {"p50", s.P50Us, 5000}, {"p90", s.P90Us, 9000},
		{"p99", s.P99Us, 9900}, {"p99.9", s.P999Us, 9990}, {"max", s.MaxUs, 10000},
	} {
		// 3 significant digits: within 0.1%, plus one unit.
		if tol := c.want/1000 + 1; abs(c.got-c.want) > tol {
			t.Errorf("%s = %d µs, want %d ± %d", c.name, c.got, c.want, tol)
		}
	}
	if math.Abs(s.MeanUs-5000.5) > 5 {
		t.Errorf("mean %.1f, want about 5000.5", s.MeanUs)
	}
}

func TestRecorderClampsAndMerges(t *testing.T) {
	a, b := NewRecorder(), NewRecorder()
	a.Record(-time.Second)   // a clock step: counts as 0
	b.Record(48 * time.Hour) // beyond the range: counts as the maximum
	all := NewRecorder()
	all.Merge(a, b)
	s := all.Summary(FromSchedule)
	if s.Count != 2 {
		t.Fatalf("count %d after merge, want 2", s.Count)
	}
	if s.MinUs > 1 || s.MaxUs < histMaxUs {
		t.Errorf("min %d max %d, want about 0 and %d", s.MinUs, s.MaxUs, histMaxUs)
	}
	if NewRecorder().Summary(FromSend) != nil {
		t.Error("an empty recorder should have no summary")
	}
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// virtualClock is a clock for the paced loop whose time moves only when
// the loop sleeps or the simulated service takes time.
type virtualClock struct{ now time.Time }

func (c *virtualClock) Now() time.Time { return c.now }

func (c *virtualClock) SleepUntil(_ context.Context, t time.Time) error {
	if t.After(c.now) {
		c.now = t
	}
	return nil
}

// simulate paces n synchronous requests: each takes service, except
// request stallAt, which takes stall. It returns the latencies recorded as
// the engine records them.
func simulate(t *testing.T, rate float64, n, stallAt int64, service, stall time.Duration) *Latency {
	t.Helper()
	clk := &virtualClock{now: time.Unix(1000, 0)}
	rec := NewRecorder()
	sched := newSchedule(clk.now, rate, 0, 1)
	err := pace(context.Background(), clk, sched, n, func(i int64, origin time.Time) error {
		d := service
		if i == stallAt {
			d = stall
		}
		clk.now = clk.now.Add(d)
		rec.Record(clk.now.Sub(origin))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec.Summary(FromSchedule)
}

// A 1 s stall in a run of 10,000 requests of 0.5 ms. A closed loop stops
// sending during the stall and so records it once: its p99.9 stays at the
// service time. The open loop at 1000/s keeps the schedule: the ~1000
// records due during the stall and the backlog after it (draining at
// 0.5 ms a record) all carry their wait, so about 2000 records see up to
// 1 s and the p90 lands near 500 ms.
func TestCoordinatedOmissionCorrection(t *testing.T) {
	const n, stallAt = 10000, 1000
	service, stall := 500*time.Microsecond, time.Second

	closed := simulate(t, 0, n, stallAt, service, stall)
	if closed.P999Us > 510 || closed.MaxUs < 990_000 {
		t.Errorf("closed loop: p99.9 %d µs, max %d µs; want ≈500 and ≈1e6", closed.P999Us, closed.MaxUs)
	}

	open := simulate(t, 1000, n, stallAt, service, stall)
	if open.P50Us > 510 {
		t.Errorf("open loop: p50 %d µs, want the service time (≈500)", open.P50Us)
	}
	if open.P90Us < 450_000 || open.P90Us > 550_000 {
		t.Errorf("open loop: p90 %d µs, want ≈500,000", open.P90Us)
	}
	if open.P99Us < 900_000 || open.MaxUs > 1_010_000 {
		t.Errorf("open loop: p99 %d µs, max %d µs; want ≈980,000 and ≈1e6", open.P99Us, open.MaxUs)
	}
}

// Without a stall, a service faster than the schedule shows only the
// service time, open or closed.
func TestOpenLoopWithoutStall(t *testing.T) {
	got := simulate(t, 1000, 1000, -1, 200*time.Microsecond, 0)
	if got.MaxUs > 201 || got.MinUs < 199 {
		t.Errorf("min %d max %d µs, want 200", got.MinUs, got.MaxUs)
	}
}

// P producers at rate R send, together, one record every 1/R.
func TestScheduleStaggersWorkers(t *testing.T) {
	start := time.Unix(0, 0)
	const workers, rate = 4, 1000.0
	seen := map[time.Duration]bool{}
	for w := range workers {
		s := newSchedule(start, rate, w, workers)
		for i := range int64(25) {
			seen[s.due(i).Sub(start)] = true
		}
	}
	for k := range 100 {
		if !seen[time.Duration(k)*time.Millisecond] {
			t.Fatalf("no worker due at %d ms", k)
		}
	}
	if newSchedule(start, 0, 1, 2).open() {
		t.Error("rate 0 must be closed loop")
	}
}

func TestPaceStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err := pace(ctx, realClock{}, schedule{}, 10, func(int64, time.Time) error { calls++; return nil })
	if !errors.Is(err, context.Canceled) || calls != 0 {
		t.Errorf("err %v after %d calls, want context.Canceled after 0", err, calls)
	}
}

func TestResultJSONShape(t *testing.T) {
	lat := &Latency{From: FromSchedule, Count: 3, MinUs: 1, MeanUs: 2, P50Us: 2, P90Us: 3, P99Us: 3, P999Us: 3, MaxUs: 3}
	res := &Result{
		Config:  Config{Mode: E2E, Topic: "t", Records: 3, Size: 128, Via: ViaFetch},
		Wire:    2,
		Stats:   Stats{Records: 3, Bytes: 384, ElapsedS: 1, RecordsPerS: 3, MBPerS: 0.000384, Latency: lat},
		Produce: &Stats{Records: 3},
	}
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"config", "wire", "records", "bytes", "errors", "elapsed_s", "records_per_s", "mb_per_s", "latency", "produce"} {
		if _, ok := m[k]; !ok {
			t.Errorf("missing top-level key %q in %s", k, buf.String())
		}
	}
	if mode := m["config"].(map[string]any)["mode"]; mode != "e2e" {
		t.Errorf("config.mode = %v", mode)
	}
	if m["wire"] != 2.0 {
		t.Errorf("wire = %v, want 2", m["wire"])
	}
	l := m["latency"].(map[string]any)
	for _, k := range []string{"measured_from", "count", "min_us", "mean_us", "p50_us", "p90_us", "p99_us", "p99_9_us", "max_us"} {
		if _, ok := l[k]; !ok {
			t.Errorf("missing latency key %q", k)
		}
	}
	if l["measured_from"] != "schedule" {
		t.Errorf("measured_from = %v", l["measured_from"])
	}
	if p := m["produce"].(map[string]any); p["latency"] != nil {
		t.Errorf("untimed side: latency = %v, want null", p["latency"])
	}

	buf.Reset()
	res.Produce = nil
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), `"produce"`) {
		t.Error("produce should be omitted when absent")
	}
}

func TestWriteText(t *testing.T) {
	res := &Result{
		Config: Config{Mode: Produce, Topic: "t", Records: 1000, Size: 128, Producers: 1, Rate: 500, Via: ViaFetch, Compression: "zstd"},
		Wire:   1,
		Stats: Stats{Records: 1000, Bytes: 128000, ElapsedS: 2, RecordsPerS: 500, MBPerS: 0.064,
			Latency: &Latency{From: FromSchedule, Count: 1000, P50Us: 250, P90Us: 1500, P99Us: 2_500_000, P999Us: 2_600_000, MaxUs: 2_700_000}},
	}
	var buf bytes.Buffer
	if err := res.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"produce wire=v1 topic=t records=1,000", "async compression=zstd", "open-loop rate=500/s", "500 rec/s",
		"p50 250µs", "p90 1.50ms", "p99 2.50s", "from schedule"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestConfigDefaultsAndChecks(t *testing.T) {
	ok := Config{Mode: Produce, Topic: "t", Records: 1, Size: 0}
	c, err := ok.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Producers != 1 || c.Consumers != 1 || c.Via != ViaFetch || c.Window != DefaultWindow || c.Idle != DefaultIdle || c.Compression != "none" {
		t.Errorf("defaults not applied: %+v", c)
	}
	for name, mut := range map[string]func(*Config){
		"mode":       func(c *Config) { c.Mode = "x" },
		"topic":      func(c *Config) { c.Topic = "" },
		"records":    func(c *Config) { c.Records = 0 },
		"size":       func(c *Config) { c.Size = -1 },
		"keys":       func(c *Config) { c.Keys = -1 },
		"rate":       func(c *Config) { c.Rate = -1 },
		"via":        func(c *Config) { c.Via = "carrier-pigeon" },
		"e2e size":   func(c *Config) { c.Mode, c.Size = E2E, 7 },
		"rate floor": func(c *Config) { c.Rate = 1e-9 },
		"codec":      func(c *Config) { c.Compression = "gzip" },
		"codec case": func(c *Config) { c.Compression = "ZSTD" },
		"sync codec": func(c *Config) { c.Sync, c.Compression = true, "s2" },
	} {
		bad := ok
		mut(&bad)
		if _, err := bad.withDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v, want ErrConfig", name, err)
		}
	}
}

func TestShareAddsUp(t *testing.T) {
	for _, n := range []int64{0, 1, 7, 1000, 1001} {
		for workers := 1; workers <= 5; workers++ {
			var sum int64
			for w := range workers {
				sum += share(n, w, workers)
			}
			if sum != n {
				t.Errorf("share(%d) over %d workers sums to %d", n, workers, sum)
			}
		}
	}
}

func TestPayload(t *testing.T) {
	origin := time.Unix(1700000000, 123456789)
	p := newPayload(16, 3)
	var buf recordBuf
	a := p.record(4, origin, &buf)
	if string(a.Key) != "k1" || len(a.Value) != 16 {
		t.Errorf("key %q, value %d bytes", a.Key, len(a.Value))
	}
	if got, ok := stamped(a.Value); !ok || !got.Equal(origin) {
		t.Errorf("stamp %v %v, want %v", got, ok, origin)
	}
	later := origin.Add(time.Second)
	b := p.record(8, later, &buf)
	if string(b.Key) != "k2" || !bytes.Equal(b.Value[stampBytes:], p.template[stampBytes:]) {
		t.Errorf("second record: key %q, value %x", b.Key, b.Value)
	}
	if got, _ := stamped(b.Value); !got.Equal(later) {
		t.Errorf("second stamp %v, want %v", got, later)
	}
	unstamped := newPayload(16, 0).record(1, time.Time{}, &recordBuf{})
	if unstamped.Key != nil || !bytes.Equal(unstamped.Value, newPayload(16, 0).template) {
		t.Errorf("keys 0 must send no key, and a zero origin no stamp: %q %x", unstamped.Key, unstamped.Value)
	}
	if _, ok := stamped(make([]byte, 4)); ok {
		t.Error("a short value carries no stamp")
	}
}

func TestProgressLine(t *testing.T) {
	line := progressLine(500, 1000, time.Second, 100)
	for _, want := range []string{"[", ">", " 50%", "500/1,000", "500 rec/s", "eta 1s"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	if n := len([]rune(progressLine(1, 3, time.Second, 30))); n > 30 {
		t.Errorf("line of %d runes in 30 columns", n)
	}
	if l := progressLine(1000, 1000, time.Second, 100); !strings.Contains(l, "100%") || !strings.Contains(l, "eta 0s") {
		t.Errorf("finished line %q", l)
	}
}

func TestTallyStats(t *testing.T) {
	start := time.Unix(100, 0)
	p := &Progress{}
	tl := newTally(start, p)
	tl.add(1000, 1_000_000, start.Add(2*time.Second))
	tl.fail(errors.New("boom"))
	s := tl.stats(start, nil)
	if s.Records != 1000 || s.Errors != 1 || s.ElapsedS != 2 || s.RecordsPerS != 500 || s.MBPerS != 0.5 {
		t.Errorf("stats %+v", s)
	}
	if p.Done() != 1000 || tl.err().Error() != "boom" {
		t.Errorf("progress %d, err %v", p.Done(), tl.err())
	}
}

func TestGroupDigits(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := group(n); got != want {
			t.Errorf("group(%d) = %q, want %q", n, got, want)
		}
	}
}
