package broker

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// A single node whose disk is full refuses a produce with a retriable
// reason, not an internal error, and takes it once space returns, which
// its own disk check finds; the refused records were not kept.
func TestProduceOnAFullDiskIsRetriable(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		t.Run(map[bool]string{false: "journal", true: "no journal"}[noJournal], func(t *testing.T) {
			var full atomic.Bool
			fs := vfs.NewFaulty(vfs.NewMem(), func(op vfs.Op, name string) error {
				if full.Load() && op == vfs.OpWrite && strings.HasPrefix(name, "/data/") {
					return vfs.Torn(0, syscall.ENOSPC)
				}
				return nil
			})
			b, err := Open(context.Background(), Config{DataDir: "/data", FS: fs, NoJournal: noJournal})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ctx := t.Context()
			if err := b.CreateTopic(ctx, "full", 1, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Produce(ctx, "full", []Record{{Key: []byte("k"), Value: []byte("before")}}); err != nil {
				t.Fatal(err)
			}
			full.Store(true)
			_, err = b.Produce(ctx, "full", []Record{{Key: []byte("k"), Value: []byte("refused")}})
			if !errors.Is(err, ErrRetry) {
				t.Fatalf("produce on a full disk: %v, want a retriable refusal (ErrRetry)", err)
			}
			full.Store(false)
			// The node's own disk check, every second, finds room again.
			until(t, "the disk to count as ok again", func() bool { return b.DiskState() == "ok" })
			if _, err := b.Produce(ctx, "full", []Record{{Key: []byte("k"), Value: []byte("after")}}); err != nil {
				t.Fatalf("produce once space returned: %v", err)
			}
			var got []string
			p, err := b.Fetch(ctx, FetchRequest{Topic: "full", Max: 10})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Records {
				got = append(got, string(r.Value))
			}
			if strings.Join(got, ",") != "before,after" {
				t.Fatalf("read back %v, want [before after]", got)
			}
		})
	}
}
