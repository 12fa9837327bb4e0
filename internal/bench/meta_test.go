package bench

// The metadata workload runs against a real in-process node
// (clienttest): every operation must have reached the node and done what
// it says, and the run must clean up after itself unless told to keep.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/placement"
	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

func metaDialer(addr string) Dialer {
	return func(ctx context.Context) (*client.Client, error) {
		return client.Dial(ctx, addr, client.WithCredentials("admin", "admin123"))
	}
}

func TestRunMetaDoesEachOperation(t *testing.T) {
	node := clienttest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := MetaConfig{Prefix: "m", Count: 24, Workers: 3, Vnodes: 8, Keep: true}
	res, err := RunMeta(ctx, cfg, metaDialer(node.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Ops) != 3 {
		t.Fatalf("ops %+v, want create, describe and commit", res.Ops)
	}
	for i, op := range []string{OpCreate, OpDescribe, OpCommit} {
		s := res.Ops[i]
		if s.Op != op || s.Count != 24 || s.Errors != 0 || s.Latency == nil || s.Latency.Count != 24 || s.OpsPerS <= 0 {
			t.Errorf("op %d: %+v", i, s)
		}
	}
	c, err := metaDialer(node.Addr())(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topics, err := c.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := placement.Ring{Vnodes: 8}.VnodeOf("m")
	if res.Vnode == nil || *res.Vnode != want {
		t.Errorf("result vnode %v, want %d", res.Vnode, want)
	}
	n := 0
	for _, tp := range topics {
		if !strings.HasPrefix(tp.Name, "m-") {
			continue
		}
		n++
		if v := (placement.Ring{Vnodes: 8}).VnodeOf(tp.Name); v != want {
			t.Errorf("topic %s is on vnode %d, want %d", tp.Name, v, want)
		}
		groups, err := c.ListGroups(ctx, tp.Name)
		if err != nil || len(groups) != 1 || groups[0] != metaGroup {
			t.Errorf("groups of %s: %q, %v; want the commit's group", tp.Name, groups, err)
		}
	}
	if n != 24 {
		t.Errorf("%d topics kept, want 24", n)
	}
	var text, js bytes.Buffer
	if err := res.WriteText(&text); err != nil || !strings.Contains(text.String(), "commit") {
		t.Errorf("text report %q, %v", text.String(), err)
	}
	if err := res.WriteJSON(&js); err != nil || !json.Valid(js.Bytes()) {
		t.Errorf("json report %q, %v", js.String(), err)
	}
}

func TestRunMetaDeletesItsTopics(t *testing.T) {
	node := clienttest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := RunMeta(ctx, MetaConfig{Prefix: "gone", Count: 5}, metaDialer(node.Addr())); err != nil {
		t.Fatal(err)
	}
	c, err := metaDialer(node.Addr())(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topics, err := c.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range topics {
		if strings.HasPrefix(tp.Name, "gone-") {
			t.Errorf("topic %s left behind", tp.Name)
		}
	}
}

func TestRunMetaReportsTheFailure(t *testing.T) {
	node := clienttest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A producer may not create topics: the first create fails, and the
	// result says how far the run got.
	dial := func(ctx context.Context) (*client.Client, error) {
		return client.Dial(ctx, node.Addr(), client.WithCredentials("consumer", "consumer123"))
	}
	res, err := RunMeta(ctx, MetaConfig{Prefix: "denied", Count: 5}, dial)
	if err == nil || !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("err %v, want permission denied", err)
	}
	if res == nil || len(res.Ops) != 1 || res.Ops[0].Errors != 1 || res.Ops[0].Count != 0 {
		t.Fatalf("result %+v", res)
	}
}

func TestMetaConfigChecks(t *testing.T) {
	for _, c := range []MetaConfig{
		{},
		{Prefix: "p", Count: -1},
		{Prefix: "p", Count: maxMetaCount + 1},
		{Prefix: "p", Count: 2, Workers: 3},
		{Prefix: "p", Vnodes: -1},
	} {
		if _, err := c.withDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
	c, err := MetaConfig{Prefix: "p"}.withDefaults()
	if err != nil || c.Count != DefaultMetaCount || c.Workers != 1 {
		t.Errorf("defaults %+v, %v", c, err)
	}
}
