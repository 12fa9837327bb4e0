package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

func TestRecordConversion(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	tests := []struct {
		name string
		in   Record
		want Record
	}{
		{"nil key", Record{Value: []byte("v"), Timestamp: now}, Record{Value: []byte("v"), Timestamp: now}},
		{"empty key", Record{Key: []byte{}, Value: []byte("v"), Timestamp: now}, Record{Key: []byte{}, Value: []byte("v"), Timestamp: now}},
		{"nil value reads back empty", Record{Key: []byte("k"), Timestamp: now}, Record{Key: []byte("k"), Value: []byte{}, Timestamp: now}},
		{"zero timestamp takes now", Record{Value: []byte("v")}, Record{Value: []byte("v"), Timestamp: now}},
		{
			"headers", Record{Value: []byte("v"), Timestamp: now, Headers: []Header{{"a", []byte("1")}, {"b", nil}, {"c", []byte{}}}},
			Record{Value: []byte("v"), Timestamp: now, Headers: []Header{{"a", []byte("1")}, {"b", nil}, {"c", []byte{}}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Through real bytes, as the records travel.
			payload := wire.FetchResponse{Records: []wire.Record{toWire(&tc.in, now)}}.AppendPayload(nil)
			var resp wire.FetchResponse
			if err := resp.Decode(payload); err != nil {
				t.Fatal(err)
			}
			got := toPage(&resp).Records[0]
			if err := sameRecord(got, tc.want); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// sameRecord compares records, telling nil from empty byte slices.
func sameRecord(got, want Record) error {
	if err := sameBytes("key", got.Key, want.Key); err != nil {
		return err
	}
	if err := sameBytes("value", got.Value, want.Value); err != nil {
		return err
	}
	if !got.Timestamp.Equal(want.Timestamp) {
		return fmt.Errorf("timestamp %v, want %v", got.Timestamp, want.Timestamp)
	}
	if len(got.Headers) != len(want.Headers) {
		return fmt.Errorf("%d headers, want %d", len(got.Headers), len(want.Headers))
	}
	for i := range got.Headers {
		if got.Headers[i].Key != want.Headers[i].Key {
			return fmt.Errorf("header %d key %q, want %q", i, got.Headers[i].Key, want.Headers[i].Key)
		}
		if err := sameBytes("header "+want.Headers[i].Key, got.Headers[i].Value, want.Headers[i].Value); err != nil {
			return err
		}
	}
	return nil
}

func sameBytes(what string, got, want []byte) error {
	if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
		return fmt.Errorf("%s = %q (nil %v), want %q (nil %v)", what, got, got == nil, want, want == nil)
	}
	return nil
}

// TestProducerPromisesInOrder has the broker answer each pair of produce
// requests in reverse; promises must still run in Produce order, and the
// broker must have received the records in Produce order.
func TestProducerPromisesInOrder(t *testing.T) {
	var (
		mu       sync.Mutex
		held     func()
		received []string
	)
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		pr := req.(*wire.ProduceRequest)
		mu.Lock()
		defer mu.Unlock()
		for _, r := range pr.Records {
			received = append(received, string(r.Value))
		}
		answer := func() { fc.ok(corr, wire.CountResponse{Count: uint32(len(pr.Records))}) }
		if held == nil {
			held = answer
			return
		}
		answer()
		held()
		held = nil
	})
	c := dialFake(t, f)
	p := NewProducer(c, ProducerOptions{MaxBatchRecords: 3, Linger: time.Hour})
	const n = 102 // 34 batches of 3: an even count, so every pair is answered
	var got []string
	for i := range n {
		p.Produce(t.Context(), "t", Record{Value: []byte(strconv.Itoa(i))}, func(r Record, err error) {
			if err != nil {
				t.Errorf("promise %s: %v", r.Value, err)
			}
			got = append(got, string(r.Value)) // promises run one at a time
		})
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d promises ran, want %d", len(got), n)
	}
	for i := range n {
		if got[i] != strconv.Itoa(i) {
			t.Fatalf("promise %d was for record %s", i, got[i])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, v := range received {
		if v != strconv.Itoa(i) {
			t.Fatalf("broker received record %s at position %d", v, i)
		}
	}
}

// TestProducerBoundedBuffer: Produce waits while MaxBufferedRecords
// records await their promises.
func TestProducerBoundedBuffer(t *testing.T) {
	release := make(chan struct{})
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		go func() {
			<-release
			fc.ok(corr, wire.CountResponse{Count: 1})
		}()
	})
	c := dialFake(t, f)
	p := NewProducer(c, ProducerOptions{MaxBufferedRecords: 4, Linger: -1})
	var promised atomic.Int32
	count := func(_ Record, err error) {
		if err != nil {
			t.Error(err)
		}
		promised.Add(1)
	}
	for i := range 4 {
		p.Produce(t.Context(), "t", Record{Value: []byte{byte(i)}}, count)
	}
	returned := make(chan int32)
	go func() {
		p.Produce(t.Context(), "t", Record{Value: []byte("fifth")}, count)
		returned <- promised.Load()
	}()
	close(release) // the broker answers only now
	if n := <-returned; n == 0 {
		t.Fatal("Produce returned while the buffer was full")
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := promised.Load(); n != 5 {
		t.Fatalf("%d promises ran, want 5", n)
	}
}

// TestProducerCancelledWhileFull: a Produce whose ctx ends while the
// buffer is full fails its record, and that promise keeps its place after
// the records produced before it.
func TestProducerCancelledWhileFull(t *testing.T) {
	f := startFake(t, ignore)
	c := dialFake(t, f)
	p := NewProducer(c, ProducerOptions{MaxBufferedRecords: 2, Linger: -1})
	var errs []error // promises run one at a time
	collect := func(_ Record, err error) { errs = append(errs, err) }
	p.Produce(t.Context(), "t", Record{Value: []byte("a")}, collect)
	p.Produce(t.Context(), "t", Record{Value: []byte("b")}, collect)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	p.Produce(ctx, "t", Record{Value: []byte("c")}, collect)
	c.Close() // fails the two in flight
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 3 || !errors.Is(errs[0], ErrClosed) || !errors.Is(errs[1], ErrClosed) || !errors.Is(errs[2], context.Canceled) {
		t.Fatalf("promise errors %v, want [closed closed canceled]", errs)
	}
	var after error
	p.Produce(t.Context(), "t", Record{}, func(_ Record, err error) { after = err })
	if !errors.Is(after, ErrClosed) {
		t.Fatalf("Produce after Close: promise got %v", after)
	}
}

// fakeStreams emulates stream mode: after a subscribe the connection
// answers anything but stream_ack with unexpected_frame.
type fakeStreams struct {
	mu     sync.Mutex
	subs   map[*fakeConn]uint32 // connection -> subscribe correlation id
	acks   chan *wire.StreamAckRequest
	refuse string // when set, subscribes are refused with it
}

func (s *fakeStreams) handle(fc *fakeConn, corr uint32, req wire.Request) {
	s.mu.Lock()
	subCorr, streaming := s.subs[fc]
	s.mu.Unlock()
	switch r := req.(type) {
	case *wire.SubscribeRequest:
		if s.refuse != "" {
			fc.refuse(corr, s.refuse)
			return
		}
		s.mu.Lock()
		s.subs[fc] = corr
		s.mu.Unlock()
	case *wire.StreamAckRequest:
		if streaming {
			s.acks <- r
			cur := "after-" + *r.Cursor
			fc.ok(subCorr, wire.FetchResponse{Records: []wire.Record{{Value: []byte("next")}}, NextCursor: &cur})
		}
	default:
		if streaming {
			fc.refuse(corr, wire.ReasonUnexpectedFrame)
			return
		}
		fc.ok(corr, wire.StatusResponse{})
	}
}

func TestSubscribeHandshake(t *testing.T) {
	fs := &fakeStreams{subs: map[*fakeConn]uint32{}, acks: make(chan *wire.StreamAckRequest, 1)}
	f := startFake(t, fs.handle)
	c := dialFake(t, f)
	sub, err := c.Subscribe(t.Context(), "t", SubscribeOptions{Group: "g", Window: 10, PageMax: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Ack(t.Context(), "c1", 3); err != nil {
		t.Fatal(err)
	}
	ack := <-fs.acks
	if *ack.Topic != "t" || *ack.Group != "g" || ack.Member != nil || *ack.Cursor != "c1" || ack.Count != 3 {
		t.Fatalf("ack sent as %+v", ack)
	}
	page, err := sub.Next(t.Context())
	if err != nil || page.Cursor != "after-c1" || len(page.Records) != 1 {
		t.Fatalf("Next: %+v, %v", page, err)
	}
	sub.Close()
	if _, err := sub.Next(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
}

func TestSubscribeRefused(t *testing.T) {
	fs := &fakeStreams{subs: map[*fakeConn]uint32{}, refuse: wire.ReasonPermissionDenied}
	f := startFake(t, fs.handle)
	c := dialFake(t, f)
	if _, err := c.Subscribe(t.Context(), "t", SubscribeOptions{}); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("got %v, want ErrPermissionDenied", err)
	}
}
