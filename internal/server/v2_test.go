package server

import (
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/wire"
)

// api_versions is answered before auth, a few times at most, and lists
// every v2 key with the limits a producer must keep to.
func TestAPIVersionsBeforeAuth(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	c := n.dial(t)
	var v wire.APIVersionsResponse
	if err := v.Decode(c.ok(1, &wire.APIVersionsRequest{})); err != nil {
		t.Fatal(err)
	}
	for _, key := range []uint16{wire.KeyProduce, wire.KeyAPIVersions, wire.KeyTopicRoutes, wire.KeyProduceBatches, wire.KeyFetchBatches} {
		if !v.Serves(key, 1) {
			t.Fatalf("api_versions does not list key %d: %+v", key, v.Keys)
		}
	}
	if v.MaxBatchBytes != broker.MaxBatchBytes || v.MaxBatchRecords != broker.MaxBatchRecords || v.MaxFrame == 0 || v.NodeVersion != "" {
		t.Fatalf("limits %+v (no node version before auth)", v)
	}
	// Auth still works after, and then the release is told.
	c.login("admin", "admin123")
	if err := v.Decode(c.ok(2, &wire.APIVersionsRequest{})); err != nil || v.NodeVersion != broker.Version {
		t.Fatalf("after auth: %+v %v", v, err)
	}

	spam := n.dial(t)
	for i := uint32(1); i <= maxPreAuthVersions; i++ {
		spam.ok(i, &wire.APIVersionsRequest{})
	}
	spam.refused(9, &wire.APIVersionsRequest{}, wire.ReasonAuthRequired)
	spam.closed()

	other := n.dial(t)
	other.ok(1, &wire.APIVersionsRequest{})
	other.refused(2, &wire.TopicRoutesRequest{Topic: str("t")}, wire.ReasonAuthRequired)
	other.closed()
}

func TestProduceAndFetchBatchesOverTheWire(t *testing.T) {
	n := startAuthNode(t, broker.Config{ACLStrict: true}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicExRequest{Topic: str("t"), Bits: 8, Ranges: 2})
	admin.ok(3, createUserReq("reader", "reader-pass", "consume"))
	admin.ok(4, &wire.GrantACLRequest{User: str("reader"), Operation: str("consume"), Pattern: str("t")})

	var routes wire.TopicRoutesResponse
	if err := routes.Decode(admin.ok(5, &wire.TopicRoutesRequest{Topic: str("t")})); err != nil {
		t.Fatal(err)
	}
	if routes.Bits != 8 || len(routes.Ranges) != 2 || routes.Ranges[0].Start != 0 || routes.Ranges[1].End != 256 {
		t.Fatalf("routes %+v", routes)
	}
	// Keyless records: any range takes them.
	recs := []segment.Record{{Value: []byte("a"), Timestamp: 1}, {Value: []byte("b"), Timestamp: 2}}
	batch, err := segment.EncodeBatch(nil, 0, recs, segment.CodecZstd)
	if err != nil {
		t.Fatal(err)
	}
	req := &wire.ProduceBatchesRequest{Topic: str("t"), Batches: []wire.RangeBatch{{Range: routes.Ranges[1].Range, Batch: batch}}}
	var pr wire.ProduceBatchesResponse
	if err := pr.Decode(admin.ok(6, req)); err != nil || pr.Count != 2 || pr.Rerouted != 0 {
		t.Fatalf("%+v %v", pr, err)
	}
	bad := append([]byte(nil), batch...)
	bad[20] ^= 0xff // a flag bit no batch may set, under a CRC that no longer matches
	admin.refused(7, &wire.ProduceBatchesRequest{Topic: str("t"), Batches: []wire.RangeBatch{{Range: routes.Ranges[0].Range, Batch: bad}}}, wire.ReasonInvalidBatch)
	admin.refused(8, &wire.ProduceBatchesRequest{Topic: str("nope"), Batches: req.Batches}, wire.ReasonNoSuchTopic)

	// The reader may read and see routes, not produce.
	r := n.login(t, "reader", "reader-pass")
	r.ok(2, &wire.TopicRoutesRequest{Topic: str("t")})
	r.refused(3, req, wire.ReasonPermissionDenied)
	var fr wire.FetchBatchesResponse
	if err := fr.Decode(r.ok(4, &wire.FetchBatchesRequest{Topic: str("t")})); err != nil {
		t.Fatal(err)
	}
	if len(fr.Batches) != 1 || fr.Batches[0].Range != routes.Ranges[1].Range || fr.NextCursor == nil {
		t.Fatalf("fetch_batches %+v", fr)
	}
	got, err := segment.DecodeRecords(fr.Batches[0].Batch, nil)
	if err != nil || len(got) != 2 || string(got[0].Value) != "a" || string(got[1].Value) != "b" {
		t.Fatalf("records %+v, %v", got, err)
	}
	r.refused(5, &wire.FetchBatchesRequest{Topic: str("nope")}, wire.ReasonPermissionDenied)
	admin.refused(9, &wire.FetchBatchesRequest{Topic: str("nope")}, wire.ReasonNoSuchTopic)
	// The bad produce stored nothing: the next page is empty.
	var next wire.FetchBatchesResponse
	if err := next.Decode(r.ok(6, &wire.FetchBatchesRequest{Topic: str("t"), Cursor: fr.NextCursor})); err != nil || len(next.Batches) != 0 {
		t.Fatalf("after the end: %+v %v", next, err)
	}
}

// subscribe_batches pushes stored batches; stream_ack commits the group's
// position and returns credit, as for subscribe.
func TestSubscribeBatchesPushesAndCommits(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicRequest{Topic: str("t"), Bits: 8})
	produce := func(corr uint32, values ...string) {
		t.Helper()
		var recs []segment.Record
		for _, v := range values {
			recs = append(recs, segment.Record{Key: []byte(v), Value: []byte(v), Timestamp: 7})
		}
		batch, err := segment.EncodeBatch(nil, 0, recs, segment.CodecS2)
		if err != nil {
			t.Fatal(err)
		}
		var routes wire.TopicRoutesResponse
		if err := routes.Decode(admin.ok(corr, &wire.TopicRoutesRequest{Topic: str("t")})); err != nil {
			t.Fatal(err)
		}
		admin.ok(corr+1, &wire.ProduceBatchesRequest{Topic: str("t"), Batches: []wire.RangeBatch{{Range: routes.Ranges[0].Range, Batch: batch}}})
	}
	produce(3, "a", "b")

	sub := n.login(t, "admin", "admin123")
	sub.send(9, &wire.SubscribeBatchesRequest{Topic: str("t"), Group: str("g"), Window: 10})
	next := func() (values []string, cursor *string) {
		t.Helper()
		corr, payload, reason, err := sub.recv()
		if corr != 9 || reason != "" || err != nil {
			t.Fatalf("push: corr %d reason %q err %v", corr, reason, err)
		}
		var p wire.FetchBatchesResponse
		if err := p.Decode(payload); err != nil {
			t.Fatal(err)
		}
		for _, rb := range p.Batches {
			recs, err := segment.DecodeRecords(rb.Batch, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				values = append(values, string(r.Value))
			}
		}
		return values, p.NextCursor
	}
	got, cur := next()
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("first push %v", got)
	}
	sub.send(10, &wire.StreamAckRequest{Topic: str("t"), Group: str("g"), Cursor: cur, Count: 2})
	produce(5, "c")
	if got, _ = next(); len(got) != 1 || got[0] != "c" {
		t.Fatalf("second push %v", got)
	}
	// The ack committed the first push: the group resumes at "c". Acks
	// have no answer, so wait for the commit to show.
	deadline := time.Now().Add(10 * time.Second)
	for corr := uint32(100); ; corr++ {
		var page wire.FetchBatchesResponse
		if err := page.Decode(admin.ok(corr, &wire.FetchBatchesRequest{Topic: str("t"), Group: str("g")})); err != nil {
			t.Fatal(err)
		}
		recs, err := segment.DecodeRecords(page.Batches[0].Batch, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 1 && string(recs[0].Value) == "c" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group position never moved past the acked push: reads %v", recs)
		}
	}
}
