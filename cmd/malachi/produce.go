package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

type produceFlags struct {
	key     string
	keyFrom string
	kv      bool
	headers []string
	file    string
}

func newProduceCmd(a *app) *cobra.Command {
	f := &produceFlags{}
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce records to a topic, one per input line",
		Long: `Produce one record per line of standard input (or --file): the value is the
line without its newline. Records with the same key keep their order.

Keys: --key gives every record the same key; --kv reads "key<TAB>value" lines;
--key-from takes the key from each JSON line at a dot path (.id, .user.id).
Without any, records have no key and may land in any range.

Records are batched and pipelined; the command ends once every record is
acknowledged (durable on the server) and says how many were.`,
		Example: `  echo hello | malachi produce orders
  printf 'user-1\tcreated\nuser-2\tcreated\n' | malachi produce orders --kv
  malachi produce orders --key-from .user.id --file events.jsonl
  malachi produce orders --key user-7 --header source=cli --header v=2`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			parse, err := f.parser()
			if err != nil {
				return err
			}
			in, closeIn, err := f.input(cmd)
			if err != nil {
				return err
			}
			defer closeIn()
			topic := args[0]
			return a.run(cmd, errSubject{topic: topic}, func(ctx context.Context, s *session) error {
				return runProduce(ctx, s, topic, in, parse)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.key, "key", "", "give every record this key")
	fl.StringVar(&f.keyFrom, "key-from", "", "lines are JSON; take the key at this dot path (.id, .user.id)")
	fl.BoolVar(&f.kv, "kv", false, `lines are "key<TAB>value"`)
	fl.StringArrayVar(&f.headers, "header", nil, "add header k=v to every record (repeatable)")
	fl.StringVarP(&f.file, "file", "f", "", "read lines from this file instead of standard input")
	return cmd
}

// parser checks the key flags and returns how each line becomes a record.
func (f *produceFlags) parser() (lineParser, error) {
	set := 0
	for _, on := range []bool{f.key != "", f.keyFrom != "", f.kv} {
		if on {
			set++
		}
	}
	if set > 1 {
		return nil, usageErr("use only one of --key, --key-from and --kv")
	}
	headers, err := parseHeaders(f.headers)
	if err != nil {
		return nil, err
	}
	var path []string
	if f.keyFrom != "" {
		if path, err = parseKeyPath(f.keyFrom); err != nil {
			return nil, usageErr("--key-from: %v", err)
		}
	}
	return newLineParser(f.key, path, f.kv, headers), nil
}

// input opens --file, or standard input.
func (f *produceFlags) input(cmd *cobra.Command) (io.Reader, func(), error) {
	if f.file == "" || f.file == "-" {
		if in, ok := cmd.InOrStdin().(*os.File); ok && isTerminal(in) {
			fmt.Fprintln(cmd.ErrOrStderr(), "reading records from the terminal, one per line; Ctrl-D to finish")
		}
		return cmd.InOrStdin(), func() {}, nil
	}
	file, err := os.Open(f.file)
	if err != nil {
		return nil, nil, &exitError{code: 1, err: err}
	}
	return file, func() { file.Close() }, nil
}

// produceTally counts what the producer's promises reported. Promises run
// on the producer's goroutine while the main goroutine reads input, hence
// the atomics.
type produceTally struct {
	sent   atomic.Int64
	acked  atomic.Int64
	failed atomic.Bool
	once   sync.Once
	err    error // the first failure; read after the producer closed
}

func (t *produceTally) promise(_ client.Record, err error) {
	if err == nil {
		t.acked.Add(1)
		return
	}
	t.once.Do(func() { t.err = err })
	t.failed.Store(true)
}

// runProduce feeds every input line to an async producer, which batches
// and pipelines them, and stops at the first failure.
func runProduce(ctx context.Context, s *session, topic string, in io.Reader, parse lineParser) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var t produceTally
	prog := startProgress(s.out.errw, func() string {
		return fmt.Sprintf("produced %d of %d records to %s", t.acked.Load(), t.sent.Load(), safeText(topic))
	})
	p := client.NewProducer(s.c, client.ProducerOptions{})
	readErr := feed(ctx, p, topic, in, parse, &t)
	stop() // a second Ctrl-C while flushing ends the process
	// Close waits for the answers of everything sent; each request has
	// its own timeout, so this cannot hang on a dead server.
	closeErr := p.Close(context.WithoutCancel(ctx))
	prog.Stop()
	acked, sent := t.acked.Load(), t.sent.Load()
	err := errors.Join(t.err, readErr, closeErr)
	if err != nil {
		return fmt.Errorf("%w (%d of %d records produced)", explain(err, errSubject{topic: topic, set: s.set}), acked, sent)
	}
	if s.out.json {
		return s.out.doc(map[string]any{"topic": topic, "records": acked})
	}
	fmt.Fprintf(s.out.errw, "produced %d record%s to %s\n", acked, plural(int(acked)), safeText(topic))
	return nil
}

// feed hands lines to the producer until the input ends, a record fails
// or ctx ends. Lines are read on their own goroutine so that Ctrl-C works
// even while a terminal read blocks.
func feed(ctx context.Context, p *client.Producer, topic string, in io.Reader, parse lineParser, t *produceTally) error {
	lines := make(chan parsedLine, 1024)
	done := make(chan struct{})
	defer close(done)
	go readLines(in, parse, lines, done)
	for !t.failed.Load() {
		select {
		case <-ctx.Done():
			return errInterrupted
		case l, ok := <-lines:
			if !ok {
				return nil
			}
			if l.err != nil {
				return l.err
			}
			t.sent.Add(1)
			p.Produce(ctx, topic, l.rec, t.promise)
		}
	}
	return nil
}
