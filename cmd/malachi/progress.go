package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progressEvery is how often a progress line is redrawn: often enough to
// look alive, rarely enough to cost nothing.
const progressEvery = 200 * time.Millisecond

// progress redraws one status line on a terminal while a long operation
// runs. It draws only when w is a terminal, so that pipes and logs stay
// clean. A nil *progress is valid and draws nothing.
type progress struct {
	w      io.Writer
	render func() string
	stop   chan struct{}
	done   chan struct{}
}

// startProgress starts redrawing render() on w if w is a terminal.
func startProgress(w io.Writer, render func() string) *progress {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	p := &progress{w: w, render: render, stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.done)
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			// \r returns to the line start and \x1b[K clears the rest.
			fmt.Fprintf(p.w, "\r\x1b[K%s", p.render())
		case <-p.stop:
			fmt.Fprint(p.w, "\r\x1b[K")
			return
		}
	}
}

// Stop erases the line and waits for the redrawing to end, so that what
// is written next starts on a clean line.
func (p *progress) Stop() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
}
