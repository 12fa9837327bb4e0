package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// maxStreamLife ends a live-chart stream after a while; the browser's
// EventSource reconnects by itself, through the session check again.
const maxStreamLife = 10 * time.Minute

// sample is one point of the live charts: the node's stored totals and
// their rates since the previous point.
type sample struct {
	T       int64   `json:"t"` // Unix ms
	Records uint64  `json:"records"`
	Bytes   uint64  `json:"bytes"`
	RPS     float64 `json:"rps"` // records per second
	BPS     float64 `json:"bps"`
}

// acquireStream takes one of the bounded stream slots for ss; the counts
// live under the session table's lock.
func (d *Dashboard) acquireStream(ss *session) bool {
	s := d.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.streams >= d.cfg.MaxStreams || ss.streams >= streamsPerSession || d.userStreams[ss.user] >= d.cfg.UserStreams {
		return false
	}
	d.streams++
	ss.streams++
	d.userStreams[ss.user]++
	return true
}

func (d *Dashboard) releaseStream(ss *session) {
	s := d.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	d.streams--
	ss.streams--
	if d.userStreams[ss.user]--; d.userStreams[ss.user] <= 0 {
		delete(d.userStreams, ss.user)
	}
}

// alive reports whether ss is still in the table and unexpired, without
// counting as use: an open chart does not keep an idle session alive.
func (s *store) alive(ss *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[ss.id] == ss && !s.expiredLocked(ss, s.now())
}

// stream sends the node's totals every StreamInterval as server-sent
// events, until the browser goes, the session ends or maxStreamLife.
func (d *Dashboard) stream(w http.ResponseWriter, r *http.Request, ss *session) {
	if !d.acquireStream(ss) {
		w.Header().Set("Retry-After", "10")
		http.Error(w, "too many live streams", http.StatusTooManyRequests)
		return
	}
	defer d.releaseStream(ss)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The retry hint keeps reconnects after the stream ends to one per
	// interval at most.
	fmt.Fprintf(w, "retry: %d\n\n", max(d.cfg.StreamInterval.Milliseconds(), 1000))
	rc.Flush()
	tick := time.NewTicker(d.cfg.StreamInterval)
	defer tick.Stop()
	end := time.After(maxStreamLife)
	var prev *sample
	for {
		if !d.sessions.alive(ss) {
			return
		}
		s, err := d.sample(r, ss, prev)
		if err != nil {
			fmt.Fprintf(w, "event: failure\ndata: %q\n\n", "the node did not answer")
		} else {
			b, _ := json.Marshal(s)
			fmt.Fprintf(w, "data: %s\n\n", b)
			prev = &s
		}
		rc.SetWriteDeadline(time.Now().Add(d.cfg.StreamInterval + 10*time.Second))
		if rc.Flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-d.done:
			return
		case <-end:
			return
		case <-tick.C:
		}
	}
}

func (d *Dashboard) sample(r *http.Request, ss *session, prev *sample) (sample, error) {
	ctx, cancel := d.call(r)
	defer cancel()
	cl, release, err := d.client(ctx, ss, d.peer(r))
	if err != nil {
		return sample{}, err
	}
	defer release()
	st, err := cl.Status(ctx)
	if err != nil {
		return sample{}, err
	}
	now := time.Now()
	s := sample{T: now.UnixMilli(), Records: st.Records, Bytes: st.Bytes}
	if prev != nil {
		if secs := float64(s.T-prev.T) / 1000; secs > 0 {
			// Retention deletes records too: a falling total is no
			// negative throughput.
			if s.Records > prev.Records {
				s.RPS = float64(s.Records-prev.Records) / secs
			}
			if s.Bytes > prev.Bytes {
				s.BPS = float64(s.Bytes-prev.Bytes) / secs
			}
		}
	}
	return s, nil
}
