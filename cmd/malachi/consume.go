package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
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
	from        string
	cursor      string
	group       string
	commit      bool
	follow      bool
	max         int
	format      string
	printCursor bool
}

func newConsumeCmd(a *app) *cobra.Command {
	f := &consumeFlags{}
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Print a topic's records, from a cursor, a group's position or the start",
		Long: `Print a topic's records, by default each record's value on its own line, so
that 'malachi produce' and 'malachi consume' round-trip lines byte for byte.

Where reading starts: --cursor (a cursor printed by an earlier consume), else
--group (the group's committed position), else --from start (the default) or
--from end (only records produced from now on).

Without --follow it stops once the topic is drained; with --follow it waits
for new records until Ctrl-C, then prints the cursor to resume from.`,
		Example: `  malachi consume orders --from start
  malachi consume orders --group billing --commit
  malachi consume orders --follow --print-cursor
  malachi consume orders --cursor "$CURSOR" --max 10
  malachi consume orders --format '{{.Key}}\t{{.Value}}\t{{.Timestamp}}'
  malachi consume orders --format json | jq .value`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			format, err := newRecordFormat(f.format, a.output == "json")
			if err != nil {
				return err
			}
			topic := args[0]
			return a.run(cmd, errSubject{topic: topic}, func(ctx context.Context, s *session) error {
				return runConsume(ctx, &consumer{s: s, topic: topic, f: f, format: format})
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "start or end, when neither --cursor nor --group says where to start (default start)")
	fl.StringVar(&f.cursor, "cursor", "", "resume from this cursor")
	fl.StringVar(&f.group, "group", "", "read from this consumer group's committed position")
	fl.BoolVar(&f.commit, "commit", false, "commit the group's position after each page is printed (needs --group)")
	fl.BoolVar(&f.follow, "follow", false, "keep waiting for new records until Ctrl-C")
	fl.IntVar(&f.max, "max", 0, "stop after this many records (0: no limit)")
	fl.StringVar(&f.format, "format", "", `"value" (default), "json" (JSON lines), or a Go template over .Key .Value .Headers .Timestamp`)
	fl.BoolVar(&f.printCursor, "print-cursor", false, "print the cursor to resume from on stderr at the end")
	return cmd
}

// check rejects flag combinations that cannot mean anything.
func (f *consumeFlags) check() error {
	switch {
	case f.from != "" && f.from != "start" && f.from != "end":
		return usageErr("--from is start or end, not %q", f.from)
	case f.from != "" && (f.cursor != "" || f.group != ""):
		return usageErr("--from conflicts with --cursor and --group, which say where to start")
	case f.commit && f.group == "":
		return usageErr("--commit needs --group: it stores the group's position")
	case f.max < 0:
		return usageErr("--max must not be negative")
	}
	return nil
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
	if c.f.from == "end" {
		if err := c.skipToEnd(ctx); err != nil {
			return err
		}
	}
	// The first fetch never waits, so a cursor exists even if Ctrl-C comes
	// before any record does; later ones wait only once drained.
	wait := false
	for c.f.max == 0 || c.seen.Load() < int64(c.f.max) {
		limit := pageMax
		if c.f.max > 0 {
			limit = min(limit, c.f.max-int(c.seen.Load()))
		}
		page, err := c.fetch(ctx, limit, wait)
		if err != nil {
			return err
		}
		if err := c.emit(ctx, page); err != nil {
			return err
		}
		if len(page.Records) == 0 && !c.f.follow {
			return nil
		}
		wait = len(page.Records) == 0
	}
	return nil
}

// fetch reads the next page from the cursor, or where the flags say for
// the first page.
func (c *consumer) fetch(ctx context.Context, limit int, wait bool) (client.Page, error) {
	opt := client.FetchOptions{Cursor: c.cursor, Max: limit}
	if c.cursor == "" {
		opt.Group = c.f.group
	}
	if wait {
		opt.Wait = followWait
	}
	page, err := c.s.c.Fetch(ctx, c.topic, opt)
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
		if err := c.format(c.w, &page.Records[i]); err != nil {
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
		return c.s.c.Commit(context.WithoutCancel(ctx), c.topic, c.f.group, page.Cursor)
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
