package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/internal/top"
	"github.com/malachi-log/malachi/pkg/client"
)

// Bounds of top: the nodes it scrapes, and the rounds of scrapes it keeps
// to work out topic rates over a window.
const (
	topMaxNodes   = 64
	topMaxHistory = 64
	// defaultHTTPPort is serve's --http port, tried on the --server host
	// of a node that runs alone.
	defaultHTTPPort = "4041"
)

type topFlags struct {
	httpAddrs []string
	interval  time.Duration
	once      bool
	samples   int
	json      bool
	limit     int
}

func newTopCmd(a *app) *cobra.Command {
	var f topFlags
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show the cluster's rates, latencies, lag and repair live, from the nodes' /metrics",
		Long: `Scrape GET /metrics of every node every --interval and show, refreshing in
place on a terminal: a header with the cluster's totals; per node its
liveness, disk, produce records and MB per second, fetch records per second,
the 99th percentile of produce and fsync latency over the interval, client
connections, metadata groups led, and under-replicated, healing and damaged
segments; per topic the records and bytes it stores per second (over the
last 10 seconds: nodes refresh topic figures every 5), records, bytes and
ranges; and the consumer groups furthest behind, in records and in seconds.
Rates need two scrapes: the first snapshot shows none.

The nodes are those 'cluster status' lists, at their HTTP addresses; a node
that runs alone is scraped at the --server host on port ` + defaultHTTPPort + `. --http-addr
names the nodes instead (repeat it; host:port, or an https:// URL), and
then no client connection is made. A scrape logs in as the client does:
HTTP Basic with --user and --password, or a Bearer token (--token, or the
session token of the login). The account needs the admin permission, unless
the nodes serve /metrics without credentials.

Without a terminal, snapshots follow each other a blank line apart. --once
prints one snapshot after --samples scrapes (2 by default, so that it has
rates); --samples alone stops after that many. -o json (or --json) prints
one JSON document per snapshot. Ctrl-C stops.`,
		Example: `  malachi top
  malachi top --interval 5s --limit 10
  malachi top --once -o json | jq '.nodes[] | {name, produce_records_per_second}'
  malachi top --http-addr 10.0.0.1:4041 --http-addr 10.0.0.2:4041`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runTop(cmd, a, f) },
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.httpAddrs, "http-addr", nil, "a node's HTTP address (host:port or https://host:port); repeat for each node (default: the cluster's nodes)")
	fl.DurationVar(&f.interval, "interval", defaultWatch, "time between scrapes")
	fl.BoolVar(&f.once, "once", false, "print one snapshot, after --samples scrapes, and exit")
	fl.IntVar(&f.samples, "samples", 0, "scrapes to take before exiting (0: until Ctrl-C; 2 with --once)")
	fl.BoolVar(&f.json, "json", false, "print JSON, as -o json does")
	fl.IntVar(&f.limit, "limit", top.DefaultMaxTopics, "topics and consumer groups shown")
	return cmd
}

func runTop(cmd *cobra.Command, a *app, f topFlags) error {
	switch {
	case f.interval <= 0:
		return usageErr("--interval must be positive, not %s", f.interval)
	case f.samples < 0:
		return usageErr("--samples must be 0 or more, not %d", f.samples)
	case f.limit <= 0 || f.limit > 1000:
		return usageErr("--limit is 1 to 1000, not %d", f.limit)
	case len(f.httpAddrs) > topMaxNodes:
		return usageErr("--http-addr names %d nodes; top scrapes at most %d", len(f.httpAddrs), topMaxNodes)
	}
	if f.once && f.samples == 0 {
		f.samples = 2
	}
	out, err := a.printer(cmd)
	if err != nil {
		return err
	}
	if f.json {
		out.json = true
	}
	set, err := a.settings()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(f.httpAddrs) > 0 {
		if set.Withheld != "" {
			return usageErr("%s", set.Withheld)
		}
		nodes := make([]top.Node, len(f.httpAddrs))
		for i, addr := range f.httpAddrs {
			nodes[i] = top.Node{Name: addr, Addr: addr}
		}
		auth, err := scrapeAuthFor(set, nil)
		if err != nil {
			return err
		}
		sc, err := newScraper(set, auth)
		if err != nil {
			return err
		}
		return topLoop(ctx, out, f, sc, nodes, nil)
	}
	return a.run(cmd, errSubject{adminOnly: true}, func(_ context.Context, s *session) error {
		nodes, err := topNodes(ctx, s)
		if err != nil {
			return err
		}
		auth, err := scrapeAuthFor(s.set, s.c)
		if err != nil {
			return err
		}
		refresh := func(ctx context.Context, nodes []top.Node) []top.Node {
			// A node gone quiet holds the status no longer than a round.
			ctx, cancel := context.WithTimeout(ctx, max(f.interval, time.Second))
			defer cancel()
			return refreshNodes(ctx, s, nodes)
		}
		sc, err := newScraper(s.set, auth)
		if err != nil {
			return err
		}
		return topLoop(ctx, out, f, sc, nodes, refresh)
	})
}

// topNodes lists the cluster's nodes at their HTTP addresses; a node that
// runs alone is its own list, on the default HTTP port of its host.
func topNodes(ctx context.Context, s *session) ([]top.Node, error) {
	st, err := s.c.ClusterStatus(ctx)
	if err != nil {
		return nil, err
	}
	if st.Node == 0 {
		host, _, err := net.SplitHostPort(s.set.Server)
		if err != nil {
			return nil, usageErr("--server %q: %v", s.set.Server, err)
		}
		addr := net.JoinHostPort(host, defaultHTTPPort)
		return []top.Node{{Name: addr, Addr: addr}}, nil
	}
	var nodes []top.Node
	var missing []string
	for _, n := range st.Nodes {
		if n.HTTPAddr == "" {
			missing = append(missing, strconv.FormatUint(n.ID, 10))
			continue
		}
		if len(nodes) == topMaxNodes {
			return nil, fmt.Errorf("the cluster has more than %d nodes with an HTTP address; name those to show with --http-addr", topMaxNodes)
		}
		nodes = append(nodes, top.Node{Name: strconv.FormatUint(n.ID, 10), Addr: n.HTTPAddr, Liveness: n.Liveness})
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("no node of the cluster reports an HTTP address (nodes %s): name them with --http-addr", strings.Join(missing, ", "))
	}
	return nodes, nil
}

// topRefreshEvery is how often the cluster's membership is asked again,
// for the nodes' liveness and the nodes that joined.
const topRefreshEvery = 10 * time.Second

// refreshNodes updates the nodes' liveness and addresses from the
// cluster's status and adds the nodes that joined, at the end so that the
// earlier rounds' scrapes stay in their places. A node that left stays,
// shown with its liveness. When the status cannot be had, the nodes stay
// as they were: their scrapes say whether they answer.
func refreshNodes(ctx context.Context, s *session, nodes []top.Node) []top.Node {
	st, err := s.c.ClusterStatus(ctx)
	if err != nil || st.Node == 0 {
		return nodes
	}
	at := make(map[string]int, len(nodes))
	for i, n := range nodes {
		at[n.Name] = i
	}
	for _, n := range st.Nodes {
		name := strconv.FormatUint(n.ID, 10)
		i, ok := at[name]
		switch {
		case ok:
			nodes[i].Liveness = n.Liveness
			if n.HTTPAddr != "" {
				nodes[i].Addr = n.HTTPAddr
			}
		case n.HTTPAddr != "" && len(nodes) < topMaxNodes:
			nodes = append(nodes, top.Node{Name: name, Addr: n.HTTPAddr, Liveness: n.Liveness})
		}
	}
	return nodes
}

// scrapeAuth sets a scrape's credentials.
type scrapeAuth func(*http.Request) error

// scrapeAuthFor logs scrapes in as the command's settings say: HTTP Basic
// for a password login, else a Bearer token: the one given, or the
// session token the client's login was answered.
func scrapeAuthFor(set settings, c *client.Client) (scrapeAuth, error) {
	switch {
	case set.Auth == authPassword:
		return func(r *http.Request) error { r.SetBasicAuth(set.User, set.Password); return nil }, nil
	case set.Auth == authToken:
		return func(r *http.Request) error {
			tok := set.Token
			if set.TokenFile != "" {
				b, err := os.ReadFile(set.TokenFile)
				if err != nil {
					return err
				}
				tok = strings.TrimSpace(string(b))
			}
			r.Header.Set("Authorization", "Bearer "+tok)
			return nil
		}, nil
	case c != nil:
		return func(r *http.Request) error {
			tok, _ := c.SessionToken()
			if tok == "" {
				return errors.New("the node answered the login no session token to scrape /metrics with: use --user and --password")
			}
			r.Header.Set("Authorization", "Bearer "+tok)
			return nil
		}, nil
	}
	return nil, usageErr("--auth %s cannot log in to /metrics without a client connection: leave out --http-addr, or use --user and --password", set.Auth)
}

// scraper fetches one node's /metrics.
type scraper struct {
	hc      *http.Client
	auth    scrapeAuth
	timeout time.Duration
}

// newScraper scrapes with the command's --timeout per page; an https://
// address is verified against --tls-ca when given, else the system's
// roots.
func newScraper(set settings, auth scrapeAuth) (*scraper, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1
	if set.TLSCA != "" {
		pem, err := os.ReadFile(set.TLSCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", set.TLSCA)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &scraper{hc: &http.Client{Transport: tr}, auth: auth, timeout: set.Timeout}, nil
}

func metricsURL(addr string) string {
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		return strings.TrimSuffix(addr, "/") + "/metrics"
	}
	return "http://" + addr + "/metrics"
}

func (s *scraper) scrape(ctx context.Context, addr string, now func() time.Time) top.Scrape {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	at := now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL(addr), nil)
	if err != nil {
		return top.Failed(at, err)
	}
	// The text format: the parser reads it, and OpenMetrics is not needed.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	if err := s.auth(req); err != nil {
		return top.Failed(at, err)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return top.Failed(at, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return top.Failed(at, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body))))
	}
	sc, err := top.Parse(resp.Body, at)
	if err != nil {
		return top.Failed(at, err)
	}
	return sc
}

// round scrapes every node at once; each scrape ends by its timeout.
func (s *scraper) round(ctx context.Context, nodes []top.Node) top.Round {
	r := top.Round{At: time.Now(), Scrapes: make([]top.Scrape, len(nodes))}
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { r.Scrapes[i] = s.scrape(ctx, n.Addr, time.Now) })
	}
	wg.Wait()
	return r
}

// topLoop scrapes every interval and draws each snapshot: in place on a
// terminal, one after another elsewhere. It ends after f.samples rounds
// (printing only the last with --once), or at Ctrl-C, normally.
func topLoop(ctx context.Context, out *printer, f topFlags, s *scraper, nodes []top.Node,
	refresh func(context.Context, []top.Node) []top.Node) error {
	file, ok := out.w.(*os.File)
	tty := ok && isTerminal(file) && !out.json && !f.once
	opts := top.Options{MaxTopics: f.limit, MaxGroups: f.limit}
	var history []top.Round
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	var buf bytes.Buffer
	refreshed := time.Now()
	for n := 1; ; n++ {
		if refresh != nil && time.Since(refreshed) >= topRefreshEvery {
			nodes, refreshed = refresh(ctx, nodes), time.Now()
		}
		history = append(history, s.round(ctx, nodes))
		if ctx.Err() != nil {
			return nil
		}
		if len(history) > topMaxHistory {
			history = history[1:]
		}
		last := f.samples > 0 && n >= f.samples
		if !f.once || last {
			buf.Reset()
			if err := drawTop(&buf, out.json, top.Build(nodes, history, opts)); err != nil {
				return err
			}
			var prefix string
			switch {
			case tty:
				prefix = clearScreen
			case n > 1 && !out.json && !f.once:
				prefix = "\n"
			}
			if _, err := io.WriteString(out.w, prefix+buf.String()); err != nil {
				return err
			}
		}
		if last {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func drawTop(w io.Writer, asJSON bool, v top.View) error {
	if asJSON {
		return top.WriteJSON(w, v)
	}
	return top.WriteText(w, v)
}
