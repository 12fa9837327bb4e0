package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

const (
	// pageMax is the most records one fetch returns (the server's cap).
	pageMax = 1000
	// followWait is the long poll of --follow: the server's cap, so that an
	// idle follower costs one request per 30 s.
	followWait = 30 * time.Second
)

type consumeFlags struct {
	from   string
	cursor string
	group  string
	// member is --member: read as this member of the group, only the
	// ranges the group assigns it.
	member string
	commit bool
	follow bool
	max    int
	// last is --last: start this many records before each range's end.
	last        uint64
	lastSet     bool
	format      string
	printCursor bool
	text        textOptions
	// fromTime is --from as a time, zero for start and end.
	fromTime time.Time
}

func newConsumeCmd(a *app) *cobra.Command {
	f := &consumeFlags{}
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Print a topic's records, from a cursor, a group's position or the start",
		Long: `Print a topic's records, by default each record's value on its own line, so
that 'malachi produce' and 'malachi consume' round-trip lines byte for byte.

Where reading starts: --cursor (a cursor printed by an earlier consume), else
--group (the group's committed position), else --last N, else --from: start
(the default), end (only records produced from now on), a time in RFC 3339
(2026-01-02T15:04:05Z) or a duration back from now (-1h, -90s). A time is
resolved by the node from record timestamps, range by range: reading starts
at each range's first record at or after it.

--member M (with --group) joins the group as member M: each member reads
only the ranges the group assigns it, from the group's committed position,
and commits each page once it is printed (--member implies --commit), so two
terminals running the same command with different member names share the
topic's records instead of each printing all of them. When a member stops
(Ctrl-C, SIGTERM, or drained without --follow) it commits what it printed and
leaves, and the others take its ranges from there; one that joins gets its
share once the member reading those ranges has moved past what it printed.
Without --follow a member stops at its first empty page: its ranges are
drained, or another member has not handed them over yet. 'malachi group
describe' shows the members, their ranges and the generation.

--last N starts N records before the end of each range: N is per range, not
in total, as kcat's -o -N is per partition, so a topic of 4 ranges prints up
to 4N records. A range holding fewer prints all it has; a range that was
split counts back into its parent's records of its keys. --last goes with
none of --from, --cursor and --group.

Without --follow it stops once the topic is drained; with --follow it waits
for new records until Ctrl-C, then prints the cursor to resume from. A
follower that loses its node (a restart, a network cut) reconnects and
resumes from its cursor, so nothing is printed twice or skipped.

Output (--format):
  value    each record's value on its own line (the default); --print-keys
           and --print-headers put the key and the headers (name=value,
           comma-separated) before it, TAB-separated, as kcat -K does
  json     one JSON object per line: "key" (null for none), "value",
           "headers" [{"key","value"}], "timestamp" (RFC 3339, UTC),
           "range" (the range it was read from, when the fetch says:
           wire v2) and, on the last record of each page, "cursor"
           (resume after it).
           Keys, values and header values that are not UTF-8 are base64,
           with "key_base64", "value_base64" set; 'malachi produce
           --format json' reads these lines back, so the pair copies a topic
  TEMPLATE a Go template over ` + templateFields + `;
           \t and \n are tabs and newlines
Any other word is an error.`,
		Example: `  malachi consume orders --from start
  malachi consume orders --from -1h
  malachi consume orders --from 2026-01-02T15:04:05Z --max 10
  malachi consume orders --last 5
  malachi consume orders --last 5 --follow
  malachi consume orders --group billing --commit
  malachi consume orders --group billing --member worker-1 --follow
  malachi consume orders --follow --print-cursor
  malachi consume orders --print-keys --print-headers
  malachi consume orders --cursor "$CURSOR" --max 10
  malachi consume orders --format '{{.Key}}\t{{.Value}}\t{{.Timestamp}}'
  malachi consume orders --format json | jq .value
  malachi consume orders --format json | malachi produce orders-copy --format json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.lastSet = cmd.Flags().Changed("last")
			if err := f.check(); err != nil {
				return err
			}
			format, err := newRecordFormat(f.format, a.output == "json", f.text)
			if err != nil {
				return err
			}
			topic := args[0]
			return a.run(cmd, errSubject{topic: topic, op: "consume"}, func(ctx context.Context, s *session) error {
				return runConsume(ctx, &consumer{s: s, topic: topic, f: f, format: format})
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "start, end, an RFC 3339 time or -DURATION (-1h), when neither --cursor nor --group says where to start (default start)")
	fl.StringVar(&f.cursor, "cursor", "", "resume from this cursor")
	fl.StringVar(&f.group, "group", "", "read from this consumer group's committed position")
	fl.StringVar(&f.member, "member", "", "join --group as this member and read only its assigned ranges (implies --commit)")
	fl.BoolVar(&f.commit, "commit", false, "commit the group's position after each page is printed (needs --group)")
	fl.Uint64Var(&f.last, "last", 0, "start N records before the end of each range (N per range, like kcat -o -N per partition)")
	fl.BoolVar(&f.follow, "follow", false, "keep waiting for new records until Ctrl-C")
	fl.IntVar(&f.max, "max", 0, "stop after this many records (0: no limit)")
	fl.StringVar(&f.format, "format", "", `"value" (default), "json" (JSON lines), or a Go template over .Key .Value .Headers .Timestamp .Cursor (see above)`)
	fl.BoolVarP(&f.text.keys, "print-keys", "K", false, "print each record's key and a TAB before its value")
	fl.BoolVar(&f.text.headers, "print-headers", false, "print each record's headers (name=value,...) and a TAB before its value")
	fl.BoolVar(&f.printCursor, "print-cursor", false, "print the cursor to resume from on stderr at the end")
	return cmd
}

// check rejects flag combinations that cannot mean anything.
func (f *consumeFlags) check() error {
	if f.from != "" && f.from != "start" && f.from != "end" {
		t, err := parseFrom(f.from, time.Now())
		if err != nil {
			return err
		}
		f.fromTime = t
	}
	switch {
	case (f.text.keys || f.text.headers) && f.format != "" && f.format != "value":
		return usageErr("--print-keys and --print-headers go with the default value output; put .Key and .Headers in a --format template instead")
	case f.lastSet && (f.from != "" || f.cursor != "" || f.group != ""):
		return usageErr("--last conflicts with --from, --cursor and --group: each says where to start")
	case f.from != "" && (f.cursor != "" || f.group != ""):
		return usageErr("--from conflicts with --cursor and --group, which say where to start")
	case f.commit && f.group == "":
		return usageErr("--commit needs --group: it stores the group's position")
	case f.member != "" && f.group == "":
		return usageErr("--member needs --group: it names a member of that group")
	case f.member != "" && f.cursor != "":
		return usageErr("--member conflicts with --cursor: a member reads from the group's committed position")
	case f.max < 0:
		return usageErr("--max must not be negative")
	}
	// A member's fetches start at the group's committed position: without
	// a commit per page it would read the same page again and again.
	f.commit = f.commit || f.member != ""
	return nil
}

// parseFrom reads a --from time: RFC 3339, or a negative duration that
// counts back from now.
func parseFrom(v string, now time.Time) (time.Time, error) {
	if d, ok := strings.CutPrefix(v, "-"); ok {
		dur, err := time.ParseDuration(d)
		if err != nil || dur < 0 {
			return time.Time{}, usageErr("--from %s: a duration back from now looks like -1h, -15m or -90s", v)
		}
		return now.Add(-dur), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, usageErr("--from is start, end, an RFC 3339 time (2026-01-02T15:04:05Z) or -DURATION (-1h), not %q", v)
	}
	return t, nil
}

// consumer is one run of consume.
type consumer struct {
	s      *session
	topic  string
	f      *consumeFlags
	format recordFormat
	w      *bufio.Writer
	// cursor is the position after the last record printed, "" before the
	// first page.
	cursor string
	// seen counts records printed; the progress line reads it.
	seen atomic.Int64
	// joined is set once a member's fetch succeeded: it has a group to
	// leave.
	joined bool
}

// runConsume prints pages until the topic is drained, --max is reached or,
// with --follow, Ctrl-C. Ctrl-C is a normal end: exit 0 and the cursor.
func runConsume(ctx context.Context, c *consumer) error {
	sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	c.cursor = c.f.cursor
	c.w = bufio.NewWriterSize(c.s.out.w, 256<<10)
	var prog *progress
	if f, ok := c.s.out.w.(*os.File); !ok || !isTerminal(f) {
		// Records go to a pipe or file: show the count on the terminal.
		prog = startProgress(c.s.out.errw, c.status)
	}
	err := c.loop(sig)
	if c.f.member != "" {
		if err == nil && !c.f.follow && c.seen.Load() == 0 && sig.Err() == nil {
			c.noteIdle(ctx)
		}
		c.leave(ctx)
	}
	// Read before stop, which cancels sig too.
	interrupted := sig.Err() != nil && ctx.Err() == nil
	stop() // a second Ctrl-C ends the process at once
	prog.Stop()
	// The cursor is printed on failures too: whoever follows a topic wants
	// to resume where the output stopped, whatever stopped it.
	if c.cursor != "" && (c.f.printCursor || interrupted || c.f.follow && err != nil) {
		fmt.Fprintf(c.s.out.errw, "cursor: %s\n", safeText(c.cursor))
	}
	if interrupted {
		return nil
	}
	return err
}

func (c *consumer) status() string {
	return fmt.Sprintf("consumed %d records from %s", c.seen.Load(), safeText(c.topic))
}

func (c *consumer) loop(ctx context.Context) error {
	switch {
	case c.f.from == "end":
		if err := c.skipToEnd(ctx); err != nil {
			return err
		}
	case !c.f.fromTime.IsZero():
		cur, err := c.s.c.CursorAt(ctx, c.topic, c.f.fromTime)
		if err == nil && cur == "" {
			err = client.ErrNoSuchTopic
		}
		if err != nil {
			return err
		}
		c.cursor = cur
	case c.f.lastSet:
		// The node counts back per range, through split and merge
		// parents, which a client could not do from what it sees.
		cur, err := c.s.c.CursorFromEnd(ctx, c.topic, c.f.last)
		if err == nil && cur == "" {
			err = client.ErrNoSuchTopic
		}
		if err != nil {
			return err
		}
		c.cursor = cur
	}
	// The first fetch never waits, so a cursor exists even if Ctrl-C comes
	// before any record does; later ones wait only once drained.
	wait := false
	for c.f.max == 0 || c.seen.Load() < int64(c.f.max) {
		prev := c.cursor
		page, err := c.fetch(ctx, c.limit(), wait)
		if err != nil && c.f.follow && connectionLost(err) {
			// The node went away (a restart, a network cut): wait for it
			// and go on from the cursor, which moves only once a page
			// is printed, so nothing is printed twice or skipped.
			if err := c.reconnect(ctx, err); err != nil {
				return err
			}
			wait = false
			continue
		}
		if err != nil {
			return err
		}
		if err := c.emit(ctx, page); err != nil {
			return err
		}
		// An empty page whose cursor moved is not the end: the node
		// stopped at its read bound inside records this reader does not
		// get (expired ones, say); read on from there.
		moved := page.Cursor != prev
		if len(page.Records) == 0 && !moved && !c.f.follow {
			return nil
		}
		wait = len(page.Records) == 0 && !moved
	}
	return nil
}

// limit is the record bound of the next fetch. Without --max, a wire v2
// connection reads whole stored batches (fetch_batches, bounded by the
// node's page bytes): limit 0. With --max the bound must be exact:
// fetch_batches' max_records is.
func (c *consumer) limit() int {
	switch {
	case c.f.max > 0:
		return min(pageMax, c.f.max-int(c.seen.Load()))
	case c.s.c.WireVersion() >= 2:
		return 0
	}
	return pageMax
}

// fetch reads the next page from the cursor, or where the flags say for
// the first page.
func (c *consumer) fetch(ctx context.Context, limit int, wait bool) (client.Page, error) {
	opt := client.FetchOptions{Cursor: c.cursor, Max: limit}
	if c.cursor == "" || c.f.member != "" {
		opt.Group, opt.Member = c.f.group, c.f.member
	}
	if wait {
		opt.Wait = followWait
		if c.f.member != "" {
			opt.Wait = memberWait
		}
	}
	var (
		page client.Page
		err  error
	)
	if c.f.member != "" {
		page, err = c.memberFetch(ctx, opt)
	} else {
		page, err = c.s.c.Fetch(ctx, c.topic, opt)
	}
	if err == nil && page.Cursor == "" {
		// Wire v1 answers a fetch of a missing topic with an empty page and
		// no cursor; say so instead of printing nothing.
		err = client.ErrNoSuchTopic
	}
	return page, err
}

// emit prints a page, then commits it if asked: the group's position never
// runs ahead of what was printed.
func (c *consumer) emit(ctx context.Context, page client.Page) error {
	for i := range page.Records {
		cursor := ""
		if i == len(page.Records)-1 {
			cursor = page.Cursor
		}
		if err := c.format(c.w, &page.Records[i], cursor); err != nil {
			return err
		}
	}
	if err := c.w.Flush(); err != nil {
		return err
	}
	c.seen.Add(int64(len(page.Records)))
	c.cursor = page.Cursor
	if c.f.commit && len(page.Records) > 0 {
		// Commit even if Ctrl-C came meanwhile: the page is printed.
		return c.s.c.Commit(context.WithoutCancel(ctx), c.topic, client.CommitOptions{Group: c.f.group, Cursor: page.Cursor})
	}
	return nil
}

// skipToEnd asks the node for a cursor at the topic's end.
func (c *consumer) skipToEnd(ctx context.Context) error {
	cur, err := c.s.c.EndCursor(ctx, c.topic)
	if err != nil {
		return err
	}
	c.cursor = cur
	return nil
}

// connectionLost reports an error after which the same request may well
// succeed once the node is back.
func connectionLost(err error) bool {
	return errors.Is(err, client.ErrDisconnected) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, client.ErrRequestTimeout)
}

// reconnect waits for the node to answer again, backing off up to
// reconnectMax between attempts, until ctx ends (Ctrl-C).
func (c *consumer) reconnect(ctx context.Context, cause error) error {
	fmt.Fprintf(c.s.out.errw, "connection to %s lost (%s); reconnecting\n",
		safeText(c.s.set.Server), safeText(explainText(cause, errSubject{set: c.s.set})))
	delay := 50 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		// Status is cheap and needs no topic: it only proves the node is
		// back and this connection is logged in again.
		if _, err := c.s.c.Status(ctx); err == nil {
			fmt.Fprintf(c.s.out.errw, "reconnected to %s\n", safeText(c.s.set.Server))
			return nil
		} else if !connectionLost(err) {
			return err
		}
		delay = min(delay*2, reconnectMax)
	}
}

// reconnectMax bounds the back-off of a follower waiting for its node.
const reconnectMax = 2 * time.Second
