package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/retention"
	"github.com/malachi-log/malachi/internal/segfile"
	"github.com/malachi-log/malachi/pkg/client"
)

type replayFlags struct {
	topic       string
	from, to    uint64
	dryRun      bool
	skipDamaged bool
	compress    string
}

// replayBufferedRecords bounds the records a replay has handed to the
// producer whose promise has not run: the producer blocks beyond it, which
// also bounds the offsets the replay keeps to say where to resume, since
// every request is answered or fails within its timeout.
const replayBufferedRecords = 100_000

func newSegmentReplayCmd(a *app) *cobra.Command {
	f := &replayFlags{}
	cmd := &cobra.Command{
		Use:   "replay FILE --topic TOPIC",
		Short: "Produce the records of a segment file's valid batches into a topic",
		Long: `Read a segment .log file as 'segment inspect' does and produce every record
of its valid batches, in offset order, into --topic through the node at
--server, with the usual login flags: each record keeps its key, value,
headers and timestamp (the producer's time, which the node stores as sent).
The command ends once every record is acknowledged (durable on the node).

The file is checked in full before anything is sent, against the .seal
footer beside it when there is one: a damaged file is
refused, and nothing sent, unless --skip-damaged, which replays the valid
batches on both sides of each damaged span. --from and --to bound the
offsets replayed (inclusive); --dry-run checks the file and says what would
be sent, without connecting to a node.

What a replay cannot keep:
  - offsets: the topic gives the records offsets of its own; a record with
    a key goes to the range of its key, one without to any range;
  - an expiry as such: a client cannot set one. A record that had an
    expiry is sent with the time it had left as its TTL (the malachi.ttl_ms
    header), which the node counts from its own clock when it stores the
    record, cut to 100 years (the longest TTL a node takes, counted); a
    record whose expiry has passed is not sent, and counted. A record
    with no expiry takes the topic's default TTL, if it has one;
  - a tombstone (a record without a value): the client has no absent
    value, so it is sent with an empty one, and counted.

No idempotence across replays: replaying the same file twice, or a part of
it again, produces the records twice. On failure the command says how many
records were acknowledged and the offset to pass to --from to go on; the
records after it that were acknowledged already will then be produced
again.`,
		Example: `  malachi segment replay 00000000000000000042.log --topic orders --dry-run
  malachi segment replay 00000000000000000042.log --topic orders
  malachi segment replay 00000000000000000042.log --topic orders --skip-damaged
  malachi segment replay 00000000000000000042.log --topic orders --from 1200 --to 1299`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("to") {
				f.to = ^uint64(0)
			}
			switch {
			case f.topic == "":
				return usageErr("--topic is required: the topic to produce the records into")
			case f.from > f.to:
				return usageErr("--from %d is after --to %d", f.from, f.to)
			}
			codec, err := parseCompression(f.compress, int(a.wire))
			if err != nil {
				return err
			}
			out, err := a.printer(cmd)
			if err != nil {
				return err
			}
			return runReplay(cmd, a, out, args[0], f, codec)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.topic, "topic", "", "produce the records into this topic (required)")
	fl.Uint64Var(&f.from, "from", 0, "the first offset to replay")
	fl.Uint64Var(&f.to, "to", 0, "the last offset to replay (default: the last)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "check the file and say what would be sent; send nothing")
	fl.BoolVar(&f.skipDamaged, "skip-damaged", false, "replay the valid batches around damaged spans instead of refusing the file")
	fl.StringVar(&f.compress, "compression", "none", "compress each batch: none, zstd or s2 (wire v2 only)")
	return cmd
}

// replayPlan is what a replay of the file sends, counted before sending.
type replayPlan struct {
	Topic       string  `json:"topic"`
	File        string  `json:"file"`
	Records     int64   `json:"records"`
	FirstOffset *uint64 `json:"first_offset,omitempty"`
	LastOffset  *uint64 `json:"last_offset,omitempty"`
	Expired     int64   `json:"expired_skipped"`
	Tombstones  int64   `json:"tombstones_as_empty"`
	WithTTL     int64   `json:"with_ttl"`
	TTLClamped  int64   `json:"ttl_clamped"`
	Damaged     int     `json:"damaged_spans"`
}

// replayable says what happens to r in a replay at nowMs: whether it is
// sent, and with which TTL (0: the record's headers as they are). The
// TTL is the time r had left, at most the longest TTL a node takes
// (ttlClamped says when it was cut to that).
func replayable(r *batch.Record, f *replayFlags, nowMs int64) (send bool, ttl time.Duration) {
	if r.Offset < f.from || r.Offset > f.to {
		return false, 0
	}
	if r.Expiry == 0 {
		return true, 0
	}
	// Compared before subtracting: a file's expiry is any int64.
	if r.Expiry <= nowMs {
		return false, 0
	}
	left := retention.MaxTTLMs
	if !ttlClamped(r, nowMs) {
		left = r.Expiry - nowMs
	}
	return true, time.Duration(left) * time.Millisecond
}

// ttlClamped says r expires further from nowMs than the longest TTL a
// node takes (retention.MaxTTLMs), so that it is sent with that TTL and
// expires earlier than it would have.
func ttlClamped(r *batch.Record, nowMs int64) bool {
	return r.Expiry > nowMs && uint64(r.Expiry)-uint64(nowMs) > uint64(retention.MaxTTLMs)
}

func runReplay(cmd *cobra.Command, a *app, out *printer, path string, f *replayFlags, codec client.Codec) error {
	file, size, err := openSegmentFile(path)
	if err != nil {
		return err
	}
	defer file.Close()
	plan := replayPlan{Topic: f.topic, File: path}
	nowMs := time.Now().UnixMilli()
	sum, err := segfile.Scan(cmd.Context(), file, size, segfile.Options{SkipDamaged: f.skipDamaged}, func(b segfile.Batch) error {
		if b.Header.LastOffset() < f.from || b.Header.BaseOffset > f.to {
			return nil
		}
		return b.Records(func(r *batch.Record) error {
			send, ttl := replayable(r, f, nowMs)
			if !send {
				if r.Offset >= f.from && r.Offset <= f.to {
					plan.Expired++
				}
				return nil
			}
			if plan.Records == 0 {
				first := r.Offset
				plan.FirstOffset = &first
			}
			last := r.Offset
			plan.LastOffset = &last
			plan.Records++
			if r.Value == nil {
				plan.Tombstones++
			}
			if ttl > 0 {
				plan.WithTTL++
			}
			if ttlClamped(r, nowMs) {
				plan.TTLClamped++
			}
			return nil
		})
	})
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("%s: %w", path, err)}
	}
	plan.Damaged = sum.DamagedSpans
	// A .seal beside the file says how long it is and what it holds: a
	// sealed file cut short at a batch boundary scans clean, and only the
	// footer tells. One that cannot be read says nothing either way. With
	// no .seal this costs one failed open; with one, a second read of the
	// file for its content hash.
	rep := newSegmentReport(cmd.Context(), file, path, sum)
	fr := rep.Footer
	disagrees := fr != nil && fr.Error == "" && !fr.Agrees
	if fr != nil && fr.Error != "" {
		out.notef("%s: unreadable (%s); the file is checked without it", fr.Path, fr.Error)
	}
	if disagrees && f.skipDamaged {
		out.notef("%s does not match its seal footer (%s): replaying its valid batches as --skip-damaged asks", path, strings.Join(fr.Disagreements, "; "))
	}
	if !f.skipDamaged && (!sum.Clean() || disagrees) {
		return &exitError{code: 1, err: fmt.Errorf("%s; nothing was sent: see 'malachi segment inspect %s', and add --skip-damaged to replay the valid batches around the damage",
			rep.damageLine(path), path)}
	}
	if f.dryRun {
		return plan.print(out, true)
	}
	if plan.Records == 0 {
		out.notef("nothing to replay: no record of %s lies in the offsets asked for, or all have expired", path)
		return plan.print(out, false)
	}
	return a.run(cmd, errSubject{topic: f.topic, op: "produce"}, func(ctx context.Context, s *session) error {
		return replay(ctx, s, file, size, f, codec, &plan)
	})
}

func (p *replayPlan) print(out *printer, dry bool) error {
	if out.json {
		return out.doc(map[string]any{"dry_run": dry, "plan": p})
	}
	verb := "replayed"
	if dry {
		verb = "would replay"
	}
	line := fmt.Sprintf("%s %d record%s of %s to %s", verb, p.Records, plural(int(p.Records)), p.File, p.Topic)
	if p.FirstOffset != nil {
		line += fmt.Sprintf(" (offsets %d to %d)", *p.FirstOffset, *p.LastOffset)
	}
	out.textf("%s", line)
	if p.Expired > 0 {
		out.textf("skipped %d expired record%s", p.Expired, plural(int(p.Expired)))
	}
	if p.WithTTL > 0 {
		out.textf("%d record%s sent with the time to live they had left", p.WithTTL, plural(int(p.WithTTL)))
	}
	if p.TTLClamped > 0 {
		years := retention.MaxTTLMs / maxTTLYearMs
		out.textf("%d record%s expire more than %d years from now: sent with a time to live of %d years, the longest a node takes",
			p.TTLClamped, plural(int(p.TTLClamped)), years, years)
	}
	if p.Tombstones > 0 {
		out.textf("%d tombstone%s sent with empty values", p.Tombstones, plural(int(p.Tombstones)))
	}
	if p.Damaged > 0 {
		out.textf("skipped %d damaged span%s", p.Damaged, plural(p.Damaged))
	}
	return nil
}

// maxTTLYearMs is the year retention.MaxTTLMs counts in (365.25 days).
const maxTTLYearMs = 36525 * 24 * 3600 * 1000 / 100

// replayTally follows the records sent and acknowledged. Promises run on
// the producer's goroutine while the scan sends, hence the lock.
type replayTally struct {
	mu      sync.Mutex
	sent    int64
	acked   int64
	pending []uint64 // offsets sent, in order, from the first not acknowledged
	done    []bool   // beside pending: acknowledged
	skip    int      // how many of pending's head are acknowledged
	base    int      // the sequence number of pending[0]
	last    uint64   // the last offset sent
	from    uint64   // where the replay began (--from): the resume point while nothing was sent
	err     error    // the first failure
}

// add records offset as sent and returns its promise.
func (t *replayTally) add(offset uint64) func(client.Record, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seq := t.base + len(t.pending)
	t.pending = append(t.pending, offset)
	t.done = append(t.done, false)
	t.sent++
	t.last = offset
	return func(_ client.Record, err error) { t.answer(seq, err) }
}

// answer records the answer for the record sent seq-th.
func (t *replayTally) answer(seq int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		if t.err == nil {
			t.err = err
		}
		return
	}
	t.acked++
	t.done[seq-t.base] = true
	for t.skip < len(t.done) && t.done[t.skip] {
		t.skip++
	}
	// Drop the acknowledged head once it is most of the slices, so that
	// they hold the records in flight and not the whole file.
	if t.skip > 4096 && t.skip*2 > len(t.done) {
		t.pending = append(t.pending[:0], t.pending[t.skip:]...)
		t.done = append(t.done[:0], t.done[t.skip:]...)
		t.base += t.skip
		t.skip = 0
	}
}

// failed returns the first failure, if any.
func (t *replayTally) failed() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// resume is the offset to replay from after a failure: the first record
// sent and not acknowledged, else the one after the last sent, else
// (nothing sent) where the replay began.
func (t *replayTally) resume() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sent == 0 {
		return t.from
	}
	if t.skip < len(t.pending) {
		return t.pending[t.skip]
	}
	return t.last + 1
}

func (t *replayTally) counts() (sent, acked int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent, t.acked
}

// errStopReplay ends the scan once a record failed.
var errStopReplay = errors.New("replay stopped")

func replay(ctx context.Context, s *session, file *os.File, size int64, f *replayFlags, codec client.Codec, plan *replayPlan) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := &replayTally{pending: make([]uint64, 0, 1024), done: make([]bool, 0, 1024), from: f.from}
	prog := startProgress(s.out.errw, func() string {
		sent, acked := t.counts()
		return fmt.Sprintf("replayed %d of %d records to %s (%d sent)", acked, plan.Records, safeText(f.topic), sent)
	})
	p := client.NewProducer(s.c, client.ProducerOptions{Compression: codec, MaxBufferedRecords: replayBufferedRecords})
	nowMs := time.Now().UnixMilli()
	_, scanErr := segfile.Scan(ctx, file, size, segfile.Options{SkipDamaged: f.skipDamaged}, func(b segfile.Batch) error {
		if b.Header.LastOffset() < f.from || b.Header.BaseOffset > f.to {
			return nil
		}
		return b.Records(func(r *batch.Record) error {
			if t.failed() != nil {
				return errStopReplay
			}
			send, ttl := replayable(r, f, nowMs)
			if !send {
				return nil
			}
			rec := clientRecord(r)
			if ttl > 0 {
				rec.SetTTL(ttl)
			}
			// Produce copies the record's bytes, which alias the scan's
			// buffer, before it returns.
			p.Produce(ctx, f.topic, rec, t.add(r.Offset))
			return nil
		})
	})
	stop() // a second Ctrl-C while the producer drains ends the process
	closeErr := p.Close(context.WithoutCancel(ctx))
	prog.Stop()
	if errors.Is(scanErr, errStopReplay) {
		scanErr = nil
	}
	if errors.Is(scanErr, context.Canceled) {
		scanErr = errInterrupted
	}
	sent, acked := t.counts()
	if err := errors.Join(t.failed(), scanErr, closeErr); err != nil {
		return fmt.Errorf("%w (%d of %d records acknowledged, %d sent; to go on, run again with --from %d: records after it may have been stored already and would then be stored twice)",
			explain(err, errSubject{topic: f.topic, set: s.set, op: "produce"}), acked, plan.Records, sent, t.resume())
	}
	plan.Records = acked
	return plan.print(s.out, false)
}
