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
	"time"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

type produceFlags struct {
	key       string
	keyFrom   string
	kv        bool
	kvHeaders bool
	headers   []string
	file      string
	valueFile string
	format    string
	delimiter string
	skipBad   bool
	compress  string
	ttl       time.Duration
}

func newProduceCmd(a *app) *cobra.Command {
	f := &produceFlags{}
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce records to a topic, one per input line",
		Long: `Produce one record per line of standard input (or --file): the value is the
line without its newline. Records with the same key keep their order.

Keys: --key gives every record the same key; --kv reads "key<TAB>value" lines
(with --kv-headers, "key<TAB>value<TAB>name=value<TAB>..." lines, whose value
then holds no TAB); --key-from takes the key from each JSON line at a dot path
(.id, .user.id). Without any, records have no key and may land in any range.

--format json reads the lines 'malachi consume --format json' prints (key,
value, headers and timestamp, base64 where marked), so that
  malachi consume orders --format json | malachi produce copy --format json
copies a topic. --header adds headers to every record; --delimiter separates
records by another string than a newline (\0 for NUL, \t for TAB);
--value-file sends a whole file as one record. --ttl gives every record a
time to live (the malachi.ttl_ms header): readers stop seeing a record once
the node's clock passes the time it stored it plus the TTL.

A line that cannot be read (no TAB with --kv, not JSON) stops the command,
which says how many lines it read, sent and skipped; with --skip-bad such lines
are reported on stderr, skipped and counted instead.

Records are batched and pipelined; the command ends once every record is
acknowledged (durable on the server) and says how many were. On wire v2 (the
default; see --wire in 'malachi --help') each batch travels in the storage
encoding, which --compression zstd or s2 compresses; the node stores it as
sent.`,
		Example: `  echo hello | malachi produce orders
  printf 'user-1\tcreated\nuser-2\tcreated\n' | malachi produce orders --kv
  printf 'user-1\tcreated\tsource=cli\n' | malachi produce orders --kv --kv-headers
  malachi produce orders --key-from .user.id --file events.jsonl
  malachi produce orders --key user-7 --header source=cli --header v=2
  malachi produce orders --compression zstd --file events.jsonl
  malachi produce sessions --key user-7 --ttl 30m
  malachi produce images --key logo --value-file logo.png
  printf 'a;b;c' | malachi produce orders --delimiter ';'
  malachi consume orders --format json | malachi produce orders-copy --format json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lf, err := f.lineFormat()
			if err != nil {
				return err
			}
			codec, err := parseCompression(f.compress, int(a.wire))
			if err != nil {
				return err
			}
			in, closeIn, err := f.input(cmd)
			if err != nil {
				return err
			}
			defer closeIn()
			topic := args[0]
			return a.run(cmd, errSubject{topic: topic, op: "produce"}, func(ctx context.Context, s *session) error {
				return runProduce(ctx, s, topic, in, lf, f.skipBad, codec)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.key, "key", "", "give every record this key")
	fl.StringVar(&f.keyFrom, "key-from", "", "lines are JSON; take the key at this dot path (.id, .user.id)")
	fl.BoolVar(&f.kv, "kv", false, `lines are "key<TAB>value"`)
	fl.BoolVar(&f.kvHeaders, "kv-headers", false, `with --kv, lines are "key<TAB>value<TAB>name=value<TAB>..."`)
	fl.StringArrayVar(&f.headers, "header", nil, "add header k=v to every record (repeatable)")
	fl.StringVarP(&f.file, "file", "f", "", "read lines from this file instead of standard input")
	fl.StringVar(&f.valueFile, "value-file", "", "send this whole file as the value of one record")
	fl.StringVar(&f.format, "format", "", `"lines" (default) or "json" (the lines of 'consume --format json')`)
	fl.StringVar(&f.delimiter, "delimiter", "", `records are separated by this string instead of a newline (\0 is NUL, \t TAB, \n newline)`)
	fl.BoolVar(&f.skipBad, "skip-bad", false, "skip lines that cannot be read, report them on stderr and count them")
	fl.StringVar(&f.compress, "compression", "none", "compress each batch: none, zstd or s2 (wire v2 only)")
	fl.DurationVar(&f.ttl, "ttl", 0, "give every record this time to live (30s, 1h; rounded up to milliseconds)")
	return cmd
}

// lineFormat checks the input flags and returns how the input becomes
// records.
func (f *produceFlags) lineFormat() (lineFormat, error) {
	lf := lineFormat{key: f.key, kv: f.kv, kvHeaders: f.kvHeaders, whole: f.valueFile != ""}
	switch f.format {
	case "", "lines", "value":
	case "json":
		lf.json = true
	default:
		return lf, usageErr("--format is lines or json, not %q", f.format)
	}
	set := 0
	for _, on := range []bool{f.keyFrom != "", f.kv, lf.json} {
		if on {
			set++
		}
	}
	switch {
	case set > 1:
		return lf, usageErr("use only one of --key-from, --kv and --format json")
	case f.key != "" && (f.keyFrom != "" || f.kv):
		return lf, usageErr("use only one of --key, --key-from and --kv")
	case f.kvHeaders && !f.kv:
		return lf, usageErr("--kv-headers goes with --kv")
	case f.valueFile != "" && (f.file != "" || f.delimiter != "" || set > 0):
		return lf, usageErr("--value-file sends one whole file as one value: it goes with --key and --header only")
	}
	if f.delimiter != "" {
		lf.delimiter = []byte(unescape(f.delimiter))
	}
	var err error
	if lf.headers, err = parseHeaders(f.headers); err != nil {
		return lf, err
	}
	if lf.headers, err = f.withTTL(lf.headers); err != nil {
		return lf, err
	}
	if f.keyFrom != "" {
		if lf.path, err = parseKeyPath(f.keyFrom); err != nil {
			return lf, usageErr("--key-from: %v", err)
		}
	}
	return lf, nil
}

// input opens --value-file or --file, or standard input.
func (f *produceFlags) input(cmd *cobra.Command) (io.Reader, func(), error) {
	name := orDefault(f.valueFile, f.file)
	if name == "" || name == "-" {
		if in, ok := cmd.InOrStdin().(*os.File); ok && isTerminal(in) {
			fmt.Fprintln(cmd.ErrOrStderr(), "reading records from the terminal, one per line; Ctrl-D to finish")
		}
		return cmd.InOrStdin(), func() {}, nil
	}
	file, err := os.Open(name)
	if err != nil {
		return nil, nil, &exitError{code: 1, err: err}
	}
	return file, func() { file.Close() }, nil
}

// produceTally counts what the producer's promises reported. Promises run
// on the producer's goroutine while the main goroutine reads input, hence
// the atomics.
type produceTally struct {
	read    atomic.Int64 // input lines read
	skipped atomic.Int64 // bad lines skipped (--skip-bad)
	sent    atomic.Int64
	acked   atomic.Int64
	failed  atomic.Bool
	once    sync.Once
	err     error // the first failure; read after the producer closed
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
func runProduce(ctx context.Context, s *session, topic string, in io.Reader, lf lineFormat, skipBad bool, codec client.Codec) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var t produceTally
	prog := startProgress(s.out.errw, func() string {
		return fmt.Sprintf("produced %d of %d records to %s", t.acked.Load(), t.sent.Load(), safeText(topic))
	})
	p := client.NewProducer(s.c, client.ProducerOptions{Compression: codec})
	readErr := feed(ctx, p, topic, in, lf, skipBad, s.out.errw, &t)
	stop() // a second Ctrl-C while flushing ends the process
	// Close waits for the answers of everything sent; each request has
	// its own timeout, so this cannot hang on a dead server.
	closeErr := p.Close(context.WithoutCancel(ctx))
	prog.Stop()
	acked, sent, read, skipped := t.acked.Load(), t.sent.Load(), t.read.Load(), t.skipped.Load()
	err := errors.Join(t.err, readErr, closeErr)
	if err != nil {
		return fmt.Errorf("%w (read %d line%s, sent %d, skipped %d; %d of %d records produced)",
			explain(err, errSubject{topic: topic, set: s.set, op: "produce"}), read, plural(int(read)), sent, skipped, acked, sent)
	}
	if s.out.json {
		return s.out.doc(map[string]any{"topic": topic, "records": acked, "skipped": skipped})
	}
	fmt.Fprintf(s.out.errw, "produced %d record%s to %s", acked, plural(int(acked)), safeText(topic))
	if skipBad {
		fmt.Fprintf(s.out.errw, "; skipped %d bad line%s", skipped, plural(int(skipped)))
	}
	fmt.Fprintln(s.out.errw)
	return nil
}

// feed hands lines to the producer until the input ends, a record fails
// or ctx ends. Lines are read on their own goroutine so that Ctrl-C works
// even while a terminal read blocks.
func feed(ctx context.Context, p *client.Producer, topic string, in io.Reader, lf lineFormat, skipBad bool, errw io.Writer, t *produceTally) error {
	lines := make(chan parsedLine, 1024)
	done := make(chan struct{})
	defer close(done)
	go readLines(in, lf, newLineParser(lf), skipBad, lines, done)
	for !t.failed.Load() {
		select {
		case <-ctx.Done():
			return errInterrupted
		case l, ok := <-lines:
			if !ok {
				return nil
			}
			if l.n > 0 {
				t.read.Add(1)
			}
			if l.err != nil && l.n > 0 && skipBad {
				t.skipped.Add(1)
				fmt.Fprintf(errw, "skipped %s\n", safeText(l.err.Error()))
				continue
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

// withTTL adds --ttl to the headers every record gets, as the header the
// node reads a record's TTL from.
func (f *produceFlags) withTTL(hs []client.Header) ([]client.Header, error) {
	if f.ttl < 0 {
		return nil, usageErr("--ttl %s: a time to live cannot be negative", f.ttl)
	}
	if f.ttl == 0 {
		return hs, nil
	}
	for _, h := range hs {
		if h.Key == client.TTLHeader {
			return nil, usageErr("--ttl and --header %s=... both set the TTL: use one", client.TTLHeader)
		}
	}
	rec := client.NewRecord(nil, nil, client.WithTTL(f.ttl))
	return append(hs, rec.Headers...), nil
}
