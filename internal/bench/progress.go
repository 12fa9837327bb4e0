package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressEvery is how often the progress line is redrawn.
const progressEvery = 200 * time.Millisecond

// ShowProgress redraws a one-line progress bar for p on w (a terminal)
// until the returned stop is called, which erases the line. width is the
// terminal's width in columns.
func ShowProgress(w io.Writer, p *Progress, width int) (stop func()) {
	start := time.Now()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprint(w, "\r\033[K")
				return
			case now := <-t.C:
				fmt.Fprint(w, "\r"+progressLine(p.Done(), p.Total(), now.Sub(start), width))
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
		})
	}
}

// progressLine renders done of total after elapsed, in at most width
// columns: a bar, the percentage, the counts, the rate and the time left.
func progressLine(done, total int64, elapsed time.Duration, width int) string {
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	frac := 0.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	eta := "?"
	if rate > 0 && total > done {
		eta = (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second).String()
	} else if total > 0 && done >= total {
		eta = "0s"
	}
	text := fmt.Sprintf(" %3.0f%% %s/%s  %s rec/s  eta %s",
		frac*100, group(done), group(total), group(int64(rate)), eta)
	// The bar keeps one width whatever the text, so that it does not
	// jitter; the text is cut rather than wrapped on a narrow terminal.
	barWidth := min(width-progressText, 40)
	if barWidth < 5 {
		return truncate(text, width-1)
	}
	fill := int(frac * float64(barWidth))
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", barWidth-fill)
	if fill > 0 && fill < barWidth {
		bar = bar[:fill-1] + ">" + bar[fill:]
	}
	return truncate("["+bar+"]"+text, width-1)
}

// progressText is the room kept for the text after the bar.
const progressText = 60

func truncate(s string, n int) string {
	r := []rune(s)
	if n <= 0 {
		return ""
	}
	if len(r) > n {
		return string(r[:n])
	}
	return s
}
