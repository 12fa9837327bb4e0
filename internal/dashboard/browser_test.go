package dashboard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/malachi-log/malachi/internal/httpapi"
	"github.com/malachi-log/malachi/internal/testenv"
	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

type alwaysReady struct{}

func (alwaysReady) Ready() error { return nil }

// pageProblems collects what the browser reports as wrong: console errors
// and warnings, uncaught exceptions and log entries at error level, which
// is where Chromium reports Content-Security-Policy violations.
type pageProblems struct {
	mu   sync.Mutex
	list []string
}

func (p *pageProblems) add(s string) {
	p.mu.Lock()
	p.list = append(p.list, s)
	p.mu.Unlock()
}

func (p *pageProblems) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.list
	p.list = nil
	return l
}

func (p *pageProblems) listen(ev any) {
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
			var args []string
			for _, a := range e.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			p.add(fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " ")))
		}
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		p.add("exception: " + msg)
	case *log.EventEntryAdded:
		if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
			p.add(fmt.Sprintf("log %s/%s: %s (%s)", e.Entry.Source, e.Entry.Level, e.Entry.Text, e.Entry.URL))
		}
	}
}

// TestBrowser drives the dashboard of a real node in headless Chromium:
// log in through the form, see a topic created by a client appear, split
// it from the page and see two ranges, and see a group's lag fall as it
// consumes. Every page must load without console errors and within the
// CSP. With MALACHI_DASHBOARD_SHOTS=dir, each page is saved there as PNG.
func TestBrowser(t *testing.T) {
	chrome := testenv.Program(t, "chromium", "chromium", "chromium-browser")
	node := clienttest.Start(t)
	dash, err := New(Config{NodeAddr: node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dash.Close)
	web := httpapi.New("127.0.0.1:0", alwaysReady{}, false)
	web.Mount("/", dash)
	if err := web.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- web.Serve() }()
	t.Cleanup(func() {
		web.Shutdown(context.Background())
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	base := "http://" + web.Addr().String()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	defer cancelCtx()
	var problems pageProblems
	if err := chromedp.Listen(ctx, problems.listen); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	shots := os.Getenv("MALACHI_DASHBOARD_SHOTS")
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p := problems.take(); len(p) > 0 {
			t.Fatalf("%s: the browser reported problems:\n%s", name, strings.Join(p, "\n"))
		}
	}
	shot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, "dashboard-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	evalInt := func(name, expr string) int {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n, err := chromedp.Run(sctx, chromedp.Evaluate[int](expr))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return n
	}

	// The problem listener must see a CSP violation, or its silence
	// below would mean nothing: an inline style attribute is one.
	step("login page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#login-form")))
	shot("login")
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = chromedp.Run(sctx, chromedp.Evaluate[chromedp.Void](`document.body.setAttribute("style", "color: red")`))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the CSP violation to be reported", func() bool { return len(problems.take()) > 0 })

	step("log in",
		chromedp.SendKeys(chromedp.CSS("#user"), "admin"),
		chromedp.SendKeys(chromedp.CSS("#password"), "admin123"),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#node-id")),
	)
	// The live charts draw points from the event stream.
	step("live charts", chromedp.Poll[chromedp.Void](`Number(document.getElementById("chart-records").dataset.points || 0) >= 3`, chromedp.WithPollingTimeout(20*time.Second)))

	admin := node.Client(t, "admin", "admin123")
	if err := admin.CreateTopic(t.Context(), "orders"); err != nil {
		t.Fatal(err)
	}
	step("the new topic appears",
		chromedp.Navigate(base+"/topics"),
		chromedp.WaitVisible(chromedp.Search(`//a[@class="topic-link" and text()="orders"]`)),
	)
	shot("topics")

	desc, err := admin.DescribeTopic(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	first := desc.ActiveRanges()[0].ID
	step("ask to split",
		chromedp.Navigate(base+"/topics/orders"),
		chromedp.WaitVisible(chromedp.CSS("#keyspace")),
		chromedp.Click(chromedp.CSS("#split-"+strconv.FormatUint(first, 10))),
		chromedp.WaitVisible(chromedp.CSS("#confirm-what")),
	)
	shot("confirm")
	step("confirm the split", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#keyspace")))
	if n := evalInt("active ranges", `document.querySelectorAll("tr.range-active").length`); n != 2 {
		t.Fatalf("after the split the page shows %d active ranges, want 2", n)
	}
	if n := evalInt("keyspace bars", `document.querySelectorAll("#keyspace g.bar.active").length`); n != 2 {
		t.Fatalf("after the split the keyspace shows %d active bars, want 2", n)
	}

	// A group that has read 10 of 50 records, then all of them.
	ctx2 := t.Context()
	var recs []client.Record
	for i := range 50 {
		recs = append(recs, client.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")})
	}
	if _, err := admin.Produce(ctx2, "orders", recs...); err != nil {
		t.Fatal(err)
	}
	page, err := admin.Fetch(ctx2, "orders", client.FetchOptions{Group: "billing", Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Commit(ctx2, "orders", client.CommitOptions{Group: "billing", Cursor: page.Cursor}); err != nil {
		t.Fatal(err)
	}
	lag := func() int {
		step("groups page", chromedp.Navigate(base+"/groups"), chromedp.WaitVisible(chromedp.CSS("#lag-orders-billing")))
		return evalInt("lag", `Number(document.getElementById("lag-orders-billing").textContent)`)
	}
	before := lag()
	shot("groups")
	if before == 0 {
		t.Fatal("the group has read 10 of 50 records and the page shows no lag")
	}
	for cur := page.Cursor; ; {
		p, err := admin.Fetch(ctx2, "orders", client.FetchOptions{Cursor: cur, Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		cur = p.Cursor
		if len(p.Records) == 0 {
			if err := admin.Commit(ctx2, "orders", client.CommitOptions{Group: "billing", Cursor: cur}); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if after := lag(); after >= before || after != 0 {
		t.Fatalf("lag after consuming everything: %d (before: %d), want 0", after, before)
	}
	step("topic page with records and a group", chromedp.Navigate(base+"/topics/orders"), chromedp.WaitVisible(chromedp.CSS("#segments")))
	shot("topic")

	// The charts move while records arrive: produce a batch every 100 ms
	// until the records chart has shown a rate above zero and drawn a
	// dozen points.
	step("overview again", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#chart-records")))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for moved, points := false, 0; !moved || points < 12; {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the throughput chart: rate seen above zero %v, %d points", moved, points)
		}
		if _, err := admin.Produce(ctx2, "orders", recs[:20]...); err != nil {
			t.Fatal(err)
		}
		moved = moved || evalInt("rate", `parseFloat(document.getElementById("rate-records").textContent) > 0 ? 1 : 0`) == 1
		points = evalInt("points", `Number(document.getElementById("chart-records").dataset.points || 0)`)
	}
	if p := problems.take(); len(p) > 0 {
		t.Fatalf("live charts: the browser reported problems:\n%s", strings.Join(p, "\n"))
	}
	shot("overview")
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
