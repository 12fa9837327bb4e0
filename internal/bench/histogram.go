package bench

import (
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Bounds of the latency histograms, in microseconds.
const (
	histMinUs   = 1
	histMaxUs   = int64(time.Hour / time.Microsecond)
	histSigFigs = 3
)

// Recorder collects latencies into an HDR histogram. It is safe for
// concurrent use; give each worker its own to keep the lock uncontended.
type Recorder struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{h: hdrhistogram.New(histMinUs, histMaxUs, histSigFigs)}
}

// Record adds one latency. Negative latencies (clock steps) count as
// zero and latencies above the histogram's range as its maximum, so that
// no sample is silently dropped.
func (r *Recorder) Record(d time.Duration) {
	us := min(max(d.Microseconds(), 0), histMaxUs)
	r.mu.Lock()
	_ = r.h.RecordValue(us) // cannot fail: us is within the bounds
	r.mu.Unlock()
}

// RecordN adds one latency n times: the latency of a request, counted
// once for each of its n records.
func (r *Recorder) RecordN(d time.Duration, n int64) {
	us := min(max(d.Microseconds(), 0), histMaxUs)
	r.mu.Lock()
	_ = r.h.RecordValues(us, n) // cannot fail: us is within the bounds
	r.mu.Unlock()
}

// Merge adds every sample of the given recorders into r.
func (r *Recorder) Merge(others ...*Recorder) {
	for _, o := range others {
		o.mu.Lock()
		c := o.h.Clone()
		o.mu.Unlock()
		r.mu.Lock()
		r.h.Merge(c)
		r.mu.Unlock()
	}
}

// Summary returns the percentiles; nil when nothing was recorded.
func (r *Recorder) Summary(from Origin) *Latency {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.h.TotalCount()
	if n == 0 {
		return nil
	}
	return &Latency{
		From:   from,
		Count:  n,
		MinUs:  r.h.Min(),
		MeanUs: r.h.Mean(),
		P50Us:  r.h.ValueAtQuantile(50),
		P90Us:  r.h.ValueAtQuantile(90),
		P99Us:  r.h.ValueAtQuantile(99),
		P999Us: r.h.ValueAtQuantile(99.9),
		MaxUs:  r.h.Max(),
	}
}

// Origin names the instant a latency is measured from.
type Origin string

// The origins a latency can be measured from.
const (
	// FromSend: the moment the record was handed to the client (closed
	// loop, sync produce and e2e).
	FromSend Origin = "send"
	// FromSchedule: the moment the record was due under the open-loop
	// schedule, whether or not it could be sent then (coordinated-omission
	// corrected).
	FromSchedule Origin = "schedule"
	// FromRequest: the moment a fetch request was issued (consume).
	FromRequest Origin = "request"
	// FromBatch: the moment the first record of the record's produce
	// request was handed to the client, to that request's ack (closed-loop
	// async produce). Every record of a request counts with the request's
	// latency, which is its oldest record's: an upper bound of each
	// record's own. Time a record spent blocked in Produce, waiting for
	// buffer space, is not in it.
	FromBatch Origin = "batch"
)

// Latency is a latency distribution in microseconds.
type Latency struct {
	From   Origin  `json:"measured_from"`
	Count  int64   `json:"count"`
	MinUs  int64   `json:"min_us"`
	MeanUs float64 `json:"mean_us"`
	P50Us  int64   `json:"p50_us"`
	P90Us  int64   `json:"p90_us"`
	P99Us  int64   `json:"p99_us"`
	P999Us int64   `json:"p99_9_us"`
	MaxUs  int64   `json:"max_us"`
}
