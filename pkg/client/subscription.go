package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/malachi-log/malachi/internal/wire"
)

// Subscription is a stream of pages the broker pushes under a credit
// window: at most window records are unacknowledged at any time. Each
// page must eventually be acknowledged with Ack, which returns its
// credits (and, with a group, commits the position).
//
// A Subscription owns its own connection, because stream mode takes a
// connection over. Next is meant for one goroutine; Ack, Heartbeat and
// Close may be called from any.
type Subscription struct {
	c                    *Client
	topic, group, member string
	cn                   *conn
	st                   *stream
	closeOnce            sync.Once

	mu sync.Mutex // guards acked
	// acked is the cursor of the last Ack with a group: the node applies
	// acks after answering nothing, so Close commits it once more,
	// confirmed.
	acked string
}

// SubscribeOptions say what a Subscription reads. Empty strings mean
// absent.
type SubscribeOptions struct {
	// Group makes the subscription start at the group's committed
	// position, and each Ack commit. Without it, the subscription starts
	// at the beginning of the topic and Ack commits nothing.
	Group string
	// Member, with Group, reads only the ranges the group assigns the
	// member. For a group member that takes its time over records, a
	// Consumer is the better fit: it commits before the ranges move.
	Member string
	// Window bounds the unacknowledged records (0 = the broker's default,
	// 100; the broker caps it at 10000).
	Window int
	// PageMax bounds the records of one page (0 = 100; capped at 1000).
	PageMax int
}

// Subscribe opens a subscription to topic, as opt says.
//
// Subscribe returns once the broker has accepted the subscription, so a
// missing topic or a missing permission fails here (ErrNoSuchTopic,
// ErrPermissionDenied) rather than on the first Next.
func (c *Client) Subscribe(ctx context.Context, topic string, opt SubscribeOptions) (*Subscription, error) {
	var (
		s   *Subscription
		err error
	)
	for attempt := 1; ; attempt++ {
		s, err = c.subscribeOnce(ctx, topic, opt)
		if err == nil || attempt >= c.cfg.retryAttempts || !shouldRetry(err, true, true) {
			break
		}
		if werr := sleep(ctx, c.backoff(attempt)); werr != nil {
			return nil, werr
		}
	}
	if err != nil {
		return nil, err
	}
	if !c.track(s) {
		s.cn.close(ErrClosed)
		return nil, ErrClosed
	}
	return s, nil
}

// subscribeOnce dials, subscribes and confirms stream mode.
//
// Wire v1 gives a successful subscribe no answer: pushes simply follow,
// perhaps much later. To tell success from refusal without waiting, a
// status request is pipelined right behind the subscribe. The broker
// handles a connection's frames in order: if the subscribe succeeded the
// connection is in stream mode and the probe is answered unexpected_frame;
// if it failed, the subscribe's error is answered first and the probe
// gets an ordinary answer.
func (c *Client) subscribeOnce(ctx context.Context, topic string, opt SubscribeOptions) (*Subscription, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	// Stream mode is wire v1 (subscribe, key 5): no need to negotiate.
	cn, err := dialConn(ctx, c.addr, &c.cfg, false)
	if err != nil {
		return nil, err
	}
	s := &Subscription{c: c, topic: topic, group: opt.Group, member: opt.Member, cn: cn, st: newStream()}
	req := wire.SubscribeRequest{
		Topic: str(topic), Group: optStr(opt.Group), Member: optStr(opt.Member),
		Window: clampU32(opt.Window), Max: clampU32(opt.PageMax),
	}
	if _, err := cn.send(req, s.st); err != nil {
		cn.close(ErrClosed)
		return nil, err
	}
	pctx, cancel := context.WithTimeoutCause(ctx, c.cfg.requestTimeout, ErrRequestTimeout)
	defer cancel()
	_, err = cn.roundTrip(pctx, wire.StatusRequest{})
	switch {
	case errors.Is(err, ErrUnexpectedFrame):
		return s, nil // in stream mode
	case err == nil:
		// Not in stream mode: the subscribe's refusal arrived first.
		err = s.st.refusal()
	}
	cn.close(ErrClosed)
	return nil, err
}

func (c *Client) checkOpen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

func clampU32(n int) uint32 { return uint32(min(max(n, 0), 1<<31)) }

// Next returns the next pushed page, waiting for one, for ctx, or for the
// subscription to end. After an error the subscription is finished
// (ErrClosed after Close; ErrDisconnected or the broker's *Error
// otherwise): open a new one to continue.
func (s *Subscription) Next(ctx context.Context) (Page, error) {
	r, err := s.st.next(ctx)
	if err != nil {
		return Page{}, err
	}
	payload, err := r.result()
	if err != nil {
		s.Close() // the broker ends the stream after an error
		return Page{}, err
	}
	var resp wire.FetchResponse
	if err := resp.Decode(payload); err != nil {
		s.cn.fail(fmt.Errorf("%w: subscribe push: %w", ErrProtocol, err))
		return Page{}, ErrProtocol
	}
	return toPage(&resp), nil
}

// Ack acknowledges count records and returns them as credit, so the
// broker may push that many more. With a group, the broker also commits
// cursor as the group's position (pass the Cursor of the last page
// processed; "" commits nothing). Ack is fire and forget: the broker sends
// no answer, so an error means only that the ack could not be written.
// Close confirms the position of the last Ack.
func (s *Subscription) Ack(ctx context.Context, cursor string, count int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req := wire.StreamAckRequest{
		Topic: str(s.topic), Group: optStr(s.group), Member: optStr(s.member),
		Cursor: optStr(cursor), Count: clampU32(count),
	}
	_, err := s.cn.send(req, nil)
	if err == nil && s.group != "" && cursor != "" {
		s.mu.Lock()
		s.acked = cursor
		s.mu.Unlock()
	}
	return err
}

// Heartbeat tells the broker the subscriber is alive without acking.
func (s *Subscription) Heartbeat(ctx context.Context) error { return s.Ack(ctx, "", 0) }

// Close ends the subscription and its connection; a member leaves its
// group. A Next waiting returns ErrClosed. With a group, Close then
// commits the position of the last Ack and waits for the node to confirm
// it (at most the request timeout), since the node may not have applied
// an ack before the connection closed. It returns the commit's error.
//
// The commit names no member: it carries the other members' ranges as the
// subscription found them, which a commit never moves back.
func (s *Subscription) Close() error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), s.c.cfg.requestTimeout, ErrRequestTimeout)
	defer cancel()
	return s.close(ctx)
}

// close is Close, its commit bounded by ctx.
func (s *Subscription) close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		s.cn.close(ErrClosed)
		s.c.untrack(s)
		s.mu.Lock()
		cursor := s.acked
		s.mu.Unlock()
		if cursor == "" {
			return
		}
		req := wire.CommitRequest{Topic: str(s.topic), Group: str(s.group), Cursor: str(cursor)}
		err = s.c.do(ctx, request{req: req, resend: true})
	})
	return err
}

// stream is the handler of a subscribe's correlation id: it queues every
// push for Next. The broker pushes at most window records unacked, so the
// queue is bounded by the window, not by memory.
type stream struct {
	mu     sync.Mutex // guards q and err
	q      []reply
	err    error
	notify chan struct{} // capacity 1: the queue or err changed
}

func newStream() *stream { return &stream{notify: make(chan struct{}, 1)} }

func (s *stream) stream() bool { return true }

func (s *stream) deliver(code uint16, payload []byte) {
	s.mu.Lock()
	s.q = append(s.q, reply{code: code, payload: payload})
	s.mu.Unlock()
	s.poke()
}

func (s *stream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.poke()
}

func (s *stream) poke() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// next pops the oldest push, waiting for one.
func (s *stream) next(ctx context.Context) (reply, error) {
	for {
		s.mu.Lock()
		if len(s.q) > 0 {
			r := s.q[0]
			s.q[0] = reply{}
			s.q = s.q[1:]
			s.mu.Unlock()
			return r, nil
		}
		err := s.err
		s.mu.Unlock()
		if err != nil {
			return reply{}, err
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return reply{}, context.Cause(ctx)
		}
	}
}

// refusal returns the error answer queued for a subscribe the broker
// refused.
func (s *stream) refusal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.q {
		if _, err := r.result(); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: subscribe neither refused nor streaming", ErrProtocol)
}
