package server

import (
	"errors"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/wire"
)

// Server clamps from wire v1: a request above a cap is clamped, not refused.
const (
	fetchMaxDefault = 100
	fetchMaxCap     = 1000
	waitCap         = 30 * time.Second
	windowDefault   = 100
	windowCap       = 10000
	pushMaxDefault  = 100
	pushMaxCap      = 1000
	producePerFrame = 1 << 20 // records in one produce request
)

func clamp(v uint32, def, cap int) int {
	if v == 0 {
		return def
	}
	return min(int(v), cap)
}

// dispatch runs one decoded request. Produce and subscribe are handled on
// the reader goroutine (their order matters); everything else runs on a
// request goroutine holding an in-flight slot.
func (c *conn) dispatch(corr uint32, req wire.Request) {
	switch r := req.(type) {
	case *wire.ProduceRequest:
		c.produce(corr, r)
	case *wire.SubscribeRequest:
		c.subscribe(corr, r)
	case *wire.StreamAckRequest:
		c.send(wire.AppendErrorFrame(nil, corr, "unexpected_frame"))
	case *wire.AuthRequest:
		c.reauth(corr, r)
	case *wire.MTLSAuthRequest, *wire.TokenAuthRequest:
		c.send(wire.AppendErrorFrame(nil, corr, "not_enabled"))
	default:
		if !c.acquire() {
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer c.release()
			resp, err := c.handle(req)
			c.answer(corr, resp, err)
		}()
	}
}

func (c *conn) answer(corr uint32, resp wire.Response, err error) {
	if err != nil {
		c.send(wire.AppendErrorFrame(nil, corr, reason(err)))
		return
	}
	c.send(wire.AppendOKFrame(frameBuffer(resp), corr, resp))
}

// frameBuffer presizes the buffer of a fetch-shaped answer, which can be
// megabytes: growing it by doubling would copy and zero it several times.
func frameBuffer(resp wire.Response) []byte {
	fr, ok := resp.(*wire.FetchResponse)
	if !ok {
		return nil
	}
	n := 64
	if fr.NextCursor != nil {
		n += len(*fr.NextCursor)
	}
	for i := range fr.Records {
		n += fr.Records[i].Size()
	}
	return make([]byte, 0, n)
}

// reauth lets a connection switch identity with a new password auth.
func (c *conn) reauth(corr uint32, r *wire.AuthRequest) {
	id, err := c.s.b.Authenticate(deref(r.User), deref(r.Password))
	if err != nil {
		c.send(wire.AppendErrorFrame(nil, corr, reason(err)))
		return
	}
	c.id = id
	c.send(wire.AppendOKFrame(nil, corr, &wire.TokenResponse{Token: id.Token}))
}

// produce submits inline so consecutive produces on this connection are
// enqueued in order; the answer goes out when the records are durable.
func (c *conn) produce(corr uint32, r *wire.ProduceRequest) {
	if r.Topic == nil {
		c.send(wire.AppendErrorFrame(nil, corr, "no_such_topic"))
		return
	}
	if err := c.s.b.Authorize(c.id, broker.OpProduce, *r.Topic); err != nil {
		c.send(wire.AppendErrorFrame(nil, corr, reason(err)))
		return
	}
	if len(r.Records) > producePerFrame {
		c.send(wire.AppendErrorFrame(nil, corr, "too_many_records"))
		return
	}
	recs := make([]broker.Record, len(r.Records))
	for i, w := range r.Records {
		recs[i] = segment.Record{Key: w.Key, Value: w.Value, Timestamp: int64(w.Timestamp), Headers: toSegmentHeaders(w.Headers)}
	}
	if !c.acquire() {
		return
	}
	c.wg.Add(1)
	err := c.s.b.ProduceAsync(c.reqCtx, *r.Topic, recs, func(n int, err error) {
		defer c.wg.Done()
		defer c.release()
		if err != nil {
			c.sendAsync(wire.AppendErrorFrame(nil, corr, reason(err)))
			return
		}
		c.sendAsync(wire.AppendOKFrame(nil, corr, &wire.CountResponse{Count: uint32(n)}))
	})
	if err != nil {
		c.wg.Done()
		c.release()
		c.send(wire.AppendErrorFrame(nil, corr, reason(err)))
	}
}

func toSegmentHeaders(hs []wire.Header) []segment.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]segment.Header, len(hs))
	for i, h := range hs {
		out[i] = segment.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

func toWireRecords(recs []broker.Record) []wire.Record {
	out := make([]wire.Record, len(recs))
	for i, r := range recs {
		hs := make([]wire.Header, len(r.Headers))
		for j, h := range r.Headers {
			hs[j] = wire.Header{Key: h.Key, Value: h.Value}
		}
		v := r.Value
		if v == nil {
			v = []byte{}
		}
		out[i] = wire.Record{Key: r.Key, Value: v, Timestamp: uint64(r.Timestamp), Headers: hs}
	}
	return out
}

// subscribe switches the connection to stream mode: the subscription runs
// on its own goroutine and pushes pages on the subscribe's correlation id.
func (c *conn) subscribe(corr uint32, r *wire.SubscribeRequest) {
	if r.Topic == nil {
		c.send(wire.AppendErrorFrame(nil, corr, "no_such_topic"))
		return
	}
	if err := c.s.b.Authorize(c.id, broker.OpConsume, *r.Topic); err != nil {
		c.send(wire.AppendErrorFrame(nil, corr, reason(err)))
		return
	}
	window := clamp(r.Window, windowDefault, windowCap)
	max := clamp(r.Max, pushMaxDefault, pushMaxCap)
	sub, err := c.s.b.Subscribe(*r.Topic, r.Group, r.Member, window, max)
	if err != nil {
		c.send(wire.AppendErrorFrame(nil, corr, reason(err)))
		return
	}
	c.stream = sub
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		err := sub.Run(c.reqCtx, func(p broker.Page) error {
			resp := &wire.FetchResponse{Records: toWireRecords(p.Records), NextCursor: p.Cursor}
			c.send(wire.AppendOKFrame(frameBuffer(resp), corr, resp))
			return c.ctx.Err()
		})
		if err != nil && c.reqCtx.Err() == nil {
			// The stream cannot go on: answer why on the subscribe's
			// correlation id, then end the connection once that frame is
			// written (drain stops the reader; the writer flushes first).
			c.s.cfg.Logger.Warn("subscription ended", "topic", *r.Topic, "err", err)
			c.send(wire.AppendErrorFrame(nil, corr, reason(err)))
			c.drain()
		}
	}()
}

// reason maps an error to its wire reason string.
func reason(err error) string {
	var me metadata.Error
	if errors.As(err, &me) {
		return string(me)
	}
	for _, known := range []error{
		broker.ErrInvalidCursor, broker.ErrShuttingDown, broker.ErrRetry, broker.ErrTooManyMembers,
		broker.ErrPermission, broker.ErrCredentials, broker.ErrNotEnabled,
	} {
		if errors.Is(err, known) {
			return known.Error()
		}
	}
	if _, ok := wire.Reasons[err.Error()]; ok {
		return err.Error()
	}
	return "internal_error"
}
