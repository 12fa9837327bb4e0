package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// defaultWatch is the interval of a bare --watch: as often as a person
// glancing at a terminal notices, rarely enough to cost the node nothing.
const defaultWatch = 2 * time.Second

// clearScreen moves the cursor home and clears the terminal, so that each
// snapshot replaces the last instead of scrolling it away.
const clearScreen = "\x1b[H\x1b[2J"

// addWatchFlag gives cmd --watch [INTERVAL]; every stays 0 without it.
func addWatchFlag(cmd *cobra.Command, every *time.Duration) {
	fl := cmd.Flags()
	fl.DurationVar(every, "watch", 0, "redraw every INTERVAL (2s when given alone) until Ctrl-C")
	fl.Lookup("watch").NoOptDefVal = defaultWatch.String()
}

// checkWatch rejects an interval that would redraw without pause.
func checkWatch(cmd *cobra.Command, every time.Duration) error {
	if cmd.Flags().Changed("watch") && every <= 0 {
		return usageErr("--watch takes a positive interval (500ms, 2s, 1m), not %s", every)
	}
	return nil
}

// watch runs draw once, or with an interval every that often until
// Ctrl-C or SIGTERM, which end it normally (nil: exit 0). Each snapshot is
// drawn into a buffer first, so an interrupted draw prints nothing half
// done. On a terminal a snapshot replaces the last; otherwise snapshots
// follow each other, a blank line apart, for a file or a pipe to keep.
func watch(ctx context.Context, out *printer, every time.Duration, draw func(context.Context, *printer) error) error {
	if every == 0 {
		return draw(ctx, out)
	}
	sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	f, ok := out.w.(*os.File)
	tty := ok && isTerminal(f)
	var buf bytes.Buffer
	snap := *out
	snap.w = &buf
	tick := time.NewTicker(every)
	defer tick.Stop()
	for first := true; ; first = false {
		buf.Reset()
		err := draw(sig, &snap)
		switch {
		case sig.Err() != nil && ctx.Err() == nil:
			return nil
		case err != nil && first:
			// Nothing to watch (no such topic, no permission): say so
			// at once, as without --watch.
			return err
		case err != nil:
			// A node restarting or a network cut passes: keep the last
			// snapshot and try again at the next tick.
			fmt.Fprintf(out.errw, "error: %s (retrying every %s)\n", safeText(err.Error()), every)
		case tty:
			var head string
			if !out.json {
				head = fmt.Sprintf("Every %s, at %s (Ctrl-C to stop)\n\n", every, time.Now().Format(time.TimeOnly))
			}
			if _, err := fmt.Fprint(out.w, clearScreen+head+buf.String()); err != nil {
				return err
			}
		default:
			sep := "\n"
			if first {
				sep = ""
			}
			if _, err := fmt.Fprint(out.w, sep+buf.String()); err != nil {
				return err
			}
		}
		select {
		case <-sig.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil
		case <-tick.C:
		}
	}
}

// watchIntervalArgs joins "--watch 5s" into "--watch=5s". The interval is
// optional, which the flag parser only knows in the joined form: alone, it
// would take 5s for a positional argument. Only a word that reads as a
// duration is joined, so "--watch orders" stays as it is (and "--watch 0s"
// meets checkWatch's refusal rather than an argument count); words after
// "--" are arguments and left alone.
func watchIntervalArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if a == "--watch" && i+1 < len(args) {
			if _, err := time.ParseDuration(args[i+1]); err == nil {
				out = append(out, a+"="+args[i+1])
				i++
				continue
			}
		}
		out = append(out, a)
	}
	return out
}
