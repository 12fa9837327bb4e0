package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/httpapi"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/metrics"
	"github.com/malachi-log/malachi/internal/retention"
	"github.com/malachi-log/malachi/internal/server"
)

type serveFlags struct {
	dataDir         string
	listen          string
	http            string
	dev             bool
	segmentMaxBytes int64
	segmentMaxAge   time.Duration
	logLevel        string
	logFormat       string
	logLang         string
	autoSplit       broker.AutoSplit
	pprof           bool
	noJournal       bool
	// /metrics: served without credentials, and the lag period.
	metricsNoAuth   bool
	metricsLagEvery time.Duration
	// TLS on the client port; see server.Config.
	tlsCert, tlsKey   string
	tlsClientCA       string
	tlsOnly           bool
	tlsReloadInterval time.Duration
	security          securityFlags
	cluster           clusterFlags
	retention         retentionFlags
	tracing           tracingFlags
	dashboard         dashboardFlags
}

func newServeCmd() *cobra.Command {
	cmd, _ := newServeCommand()
	return cmd
}

// newServeCommand returns serve and the flags it fills in.
func newServeCommand() (*cobra.Command, *serveFlags) {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a Malachi node",
		Long: `Run a Malachi node: the client protocol (wire v1 and v2) on --listen and health and
readiness on --http. Data lives in --data-dir. With --dev the development users
(admin/admin123, producer/producer123, consumer/consumer123, app/app123) are
created on first start; otherwise the admin password comes from
MALACHI_ADMIN_PASS or is generated and printed once.

With --tls-cert and --tls-key the client port speaks TLS as well as plain TCP
(told apart by the first byte), or TLS alone with --tls-only. --tls-client-ca
asks TLS clients for a certificate and verifies one presented against that CA,
for mutual TLS and mtls_auth. The certificate files are read again when they
change (checked every --tls-reload-interval) and on SIGHUP; a reload that fails
keeps the certificate in use. 'malachi dev-certs DIR' makes files to try it.

With --node-id N the node is member N of a cluster: its metadata (topics,
ranges, users, ACLs, group positions) is replicated by Raft in --vnodes
shards, it talks to other nodes on --peer-listen and gossips on
--gossip-listen, and every address it publishes uses the --advertise host.
A node without --join bootstraps a new cluster on an empty data directory;
the others join it with --join HOST:GOSSIP_PORT. Without --node-id the node
runs alone on its local metadata and cannot be joined to a cluster later.
'malachi dev --nodes 3' starts a local cluster of three to try it.

Environment variables set the defaults of the flags named with them. Sizes
take an integer or a unit (64MiB, 1GiB, 500KB); *_MS durations take
milliseconds or a unit (1h, 30s). A value that cannot be read stops serve.

` + aclModeHelp,
		Example: `  malachi serve --dev
  MALACHI_ADMIN_PASS=s3cret malachi serve --data-dir /var/lib/malachi --listen 0.0.0.0:4040
  malachi serve --dev --tls-cert certs/server.pem --tls-key certs/server-key.pem --tls-client-ca certs/ca.pem --tls-only
  malachi serve --node-id 1 --data-dir /var/lib/malachi --listen 0.0.0.0:4040 --http 0.0.0.0:4041 --advertise 10.0.0.1
  malachi serve --node-id 2 --data-dir /var/lib/malachi --listen 0.0.0.0:4040 --http 0.0.0.0:4041 --advertise 10.0.0.2 --join 10.0.0.1:4043`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.cluster.nodeIDSet = cmd.Flags().Changed("node-id") || os.Getenv("MALACHI_NODE_ID") != ""
			f.dashboard.given(cmd.Flags())
			return runServe(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", envString("MALACHI_LOG_DATA_DIR", "./malachi-data"), "data directory (env MALACHI_LOG_DATA_DIR)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:"+envString("MALACHI_TCP_PORT", "4040"), "client protocol address (env MALACHI_TCP_PORT sets the port)")
	fl.StringVar(&f.http, "http", "127.0.0.1:"+envString("MALACHI_DASHBOARD_PORT", "4041"), "HTTP address for /health, /ready, /metrics and the web dashboard (see --dashboard) (env MALACHI_DASHBOARD_PORT sets the port)")
	fl.BoolVar(&f.dev, "dev", false, "seed the development users on first start")
	fl.Int64Var(&f.segmentMaxBytes, "segment-max-bytes", envInt("MALACHI_SEGMENT_MAX_BYTES", 64<<20), "roll a range's active segment at this size (env MALACHI_SEGMENT_MAX_BYTES)")
	fl.DurationVar(&f.segmentMaxAge, "segment-max-age", time.Duration(envInt("MALACHI_SEGMENT_MAX_AGE_MS", 7*24*3600*1000))*time.Millisecond, "roll an active segment older than this (env MALACHI_SEGMENT_MAX_AGE_MS)")
	fl.StringVar(&f.logLevel, "log-level", envString("MALACHI_LOG_LEVEL", "info"), "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", envString("MALACHI_LOG_FORMAT", "text"), "log lines as text or json, each with an event name (env MALACHI_LOG_FORMAT)")
	fl.StringVar(&f.logLang, "log-lang", envString("MALACHI_LOCALE", "en_US"), "language of log messages: en_US or pt_BR (env MALACHI_LOCALE)")
	fl.BoolVar(&f.pprof, "pprof", false, "serve Go runtime profiles under /debug/pprof/ on the HTTP address")
	fl.BoolVar(&f.metricsNoAuth, "metrics-no-auth", envBool("MALACHI_METRICS_NO_AUTH"), "serve /metrics without credentials; by default a scrape logs in (HTTP Basic or a Bearer token) as an admin (env MALACHI_METRICS_NO_AUTH=true)")
	fl.DurationVar(&f.metricsLagEvery, "metrics-lag-interval", envDuration("MALACHI_METRICS_LAG_INTERVAL_MS", metrics.DefaultLagEvery), "how often /metrics' consumer-group lag is computed (env MALACHI_METRICS_LAG_INTERVAL_MS)")
	fl.BoolVar(&f.noJournal, "no-journal", envBool("MALACHI_NO_JOURNAL"), "fsync every written segment file per commit round instead of one node journal (env MALACHI_NO_JOURNAL=true)")
	fl.Int64Var(&f.autoSplit.SplitBytes, "auto-split-bytes", envInt("MALACHI_AUTO_SPLIT_BYTES", 0), "split a range automatically once it holds this many bytes; 0 = off (env MALACHI_AUTO_SPLIT_BYTES)")
	fl.Int64Var(&f.autoSplit.SplitRate, "auto-split-rate", envInt("MALACHI_AUTO_SPLIT_RATE", 0), "split a range automatically when written faster than this many bytes/s; 0 = off (env MALACHI_AUTO_SPLIT_RATE)")
	fl.Int64Var(&f.autoSplit.MergeRate, "auto-merge-rate", envInt("MALACHI_AUTO_MERGE_RATE", 0), "merge buddy ranges both written slower than this many bytes/s; 0 = never (env MALACHI_AUTO_MERGE_RATE)")
	fl.IntVar(&f.autoSplit.MaxRanges, "auto-split-max-ranges", int(envInt("MALACHI_AUTO_SPLIT_MAX_RANGES", 64)), "cap on a topic's active ranges for automatic splits")
	// These shadow the client commands' global --tls-cert and --tls-key:
	// here they are the node's own certificate.
	fl.StringVar(&f.tlsCert, "tls-cert", envString("MALACHI_TLS_CERTFILE", ""), "PEM certificate (chain) of the client port; turns TLS on (env MALACHI_TLS_CERTFILE)")
	fl.StringVar(&f.tlsKey, "tls-key", envString("MALACHI_TLS_KEYFILE", ""), "PEM private key of --tls-cert (env MALACHI_TLS_KEYFILE)")
	fl.StringVar(&f.tlsClientCA, "tls-client-ca", envString("MALACHI_TLS_CACERTFILE", ""), "PEM CA certificates to verify client certificates against, for mutual TLS (env MALACHI_TLS_CACERTFILE)")
	fl.BoolVar(&f.tlsOnly, "tls-only", os.Getenv("MALACHI_REQUIRE_TLS") == "true", "refuse plaintext connections on the client port (env MALACHI_REQUIRE_TLS=true)")
	fl.DurationVar(&f.tlsReloadInterval, "tls-reload-interval", envDuration("MALACHI_TLS_RELOAD_INTERVAL_MS", 5*time.Second), "how often to check the TLS files for changes; negative: only on SIGHUP (env MALACHI_TLS_RELOAD_INTERVAL_MS)")
	f.security.register(fl)
	f.cluster.register(fl)
	f.retention.register(fl)
	f.tracing.register(fl)
	f.dashboard.register(fl)
	return cmd, f
}

// retentionFlags are the node's defaults of the storage policy fields a
// topic's policy leaves unset. Each takes "off" (the default: the rule is
// disabled) or a value; 0 is a real bound.
type retentionFlags struct {
	maxAge, maxBytes, maxRecords, defaultTTL string
	interval                                 time.Duration
}

func (r *retentionFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&r.maxAge, "retention-max-age", envString("MALACHI_RETENTION_MAX_AGE", "off"), "delete sealed segments sealed longer ago than this (1h, 7d as 168h); off keeps them (env MALACHI_RETENTION_MAX_AGE)")
	fl.StringVar(&r.maxBytes, "retention-max-bytes", envString("MALACHI_RETENTION_MAX_BYTES", "off"), "keep at most this many sealed bytes per range (10GiB); off = no bound (env MALACHI_RETENTION_MAX_BYTES)")
	fl.StringVar(&r.maxRecords, "retention-max-records", envString("MALACHI_RETENTION_MAX_RECORDS", "off"), "keep at most this many sealed records per range; off = no bound (env MALACHI_RETENTION_MAX_RECORDS)")
	fl.StringVar(&r.defaultTTL, "default-ttl", envString("MALACHI_DEFAULT_TTL", "off"), "TTL of a record that carries none (30m); off = records without a TTL never expire (env MALACHI_DEFAULT_TTL)")
	fl.DurationVar(&r.interval, "retention-interval", envDuration("MALACHI_RETENTION_INTERVAL_MS", broker.DefaultRetentionInterval), "how often the retention sweep runs (env MALACHI_RETENTION_INTERVAL_MS)")
}

// defaults turns the flags into the node's policy defaults; the segment
// roll flags are the defaults of segment_max_bytes and segment_max_age_ms
// (the broker fills those from its own configuration).
func (r *retentionFlags) defaults() (retention.Defaults, error) {
	d := retention.Defaults{}
	set := func(flag, field, v string, parse func(string) (int64, error)) error {
		if v == "off" {
			d[field] = metadata.PolicyValue{Off: true}
			return nil
		}
		n, err := parse(v)
		if err != nil || n < 0 {
			return usageErr("--%s %q: want off or a non-negative value", flag, v)
		}
		d[field] = metadata.PolicyValue{Int: n}
		return nil
	}
	ms := func(v string) (int64, error) {
		dur, err := time.ParseDuration(v)
		return dur.Milliseconds(), err
	}
	count := func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) }
	for _, e := range []error{
		set("retention-max-age", retention.FieldMaxAge, r.maxAge, ms),
		set("retention-max-bytes", retention.FieldMaxBytes, r.maxBytes, parseSize),
		set("retention-max-records", retention.FieldMaxRecords, r.maxRecords, count),
		set("default-ttl", retention.FieldDefaultTTL, r.defaultTTL, ms),
	} {
		if e != nil {
			return nil, e
		}
	}
	if _, err := metadata.ValidatePolicy(d); err != nil {
		return nil, usageErr("--default-ttl %q: want off or at least 1ms", r.defaultTTL)
	}
	if r.interval <= 0 {
		return nil, usageErr("--retention-interval %v: want a positive duration", r.interval)
	}
	return d, nil
}

// envBool reads a true/false variable (true, 1, false, 0, ...); any
// other value stops serve with the variable's name.
func envBool(name string) bool {
	v := os.Getenv(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		badEnv(name, v, "true or false")
	}
	return b
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// envInt reads a number from the environment: an integer, or a size with
// a unit (64MiB, 1GiB, 500KB). A value that is neither is recorded and
// stops serve with the variable's name, rather than being ignored.
func envInt(name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := parseSize(v)
	if err != nil {
		badEnv(name, v, "an integer or a size such as 64MiB")
		return def
	}
	return n
}

// envDuration reads milliseconds, or a duration with a unit (1h, 30s).
func envDuration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(ms) * time.Millisecond
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		badEnv(name, v, "milliseconds or a duration such as 1h or 30s")
		return def
	}
	return d
}

// sizeUnits are the suffixes parseSize takes, longest first.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// parseSize parses "4096", "64MiB" or "1.5GB".
func parseSize(v string) (int64, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, nil
	}
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(v, u.suffix)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || f < 0 || f*float64(u.mult) > math.MaxInt64 {
			break
		}
		return int64(f * float64(u.mult)), nil
	}
	return 0, fmt.Errorf("not a size: %q", v)
}

// envProblems holds the environment variables serve could not read, by
// name; flags take their defaults from the environment when they are
// declared, before anything can fail, so the check comes in runServe.
var envProblems = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

func badEnv(name, value, want string) {
	envProblems.Lock()
	defer envProblems.Unlock()
	envProblems.m[name] = fmt.Sprintf("%s=%q is not %s", name, value, want)
}

// checkEnv fails with every variable that could not be read.
func checkEnv() error {
	envProblems.Lock()
	defer envProblems.Unlock()
	if len(envProblems.m) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(envProblems.m))
	for _, m := range envProblems.m {
		msgs = append(msgs, m)
	}
	slices.Sort(msgs)
	return usageErr("%s", strings.Join(msgs, "; "))
}

func runServe(ctx context.Context, f *serveFlags) error {
	if err := checkEnv(); err != nil {
		return err
	}
	cluster, err := f.cluster.clusterConfig(f.listen, f.http)
	if err != nil {
		return err
	}
	logger, err := newLogger(os.Stderr, f.logFormat, f.logLang, f.logLevel)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	retDefaults, err := f.retention.defaults()
	if err != nil {
		return err
	}
	cfg := broker.Config{
		Retention:         retDefaults,
		RetentionInterval: f.retention.interval,
		DataDir:           f.dataDir,
		Logger:            logger,
		NodeID:            "node-1",
		SegmentMaxBytes:   f.segmentMaxBytes,
		SegmentMaxAge:     f.segmentMaxAge,
		AutoSplit:         f.autoSplit,
		NoJournal:         f.noJournal,
		JournalPrealloc:   true,
	}
	f.security.apply(&cfg)
	if cluster != nil {
		cfg.NodeID, cfg.Cluster = cluster.name, cluster.cfg
	}
	if cfg.Tracer, err = f.tracing.open(cfg.NodeID, logger); err != nil {
		return err
	}
	defer closeTracer(cfg.Tracer, logger) // after the broker closes: its last spans are flushed
	// The client and HTTP ports are bound before broker.Open joins a
	// cluster: a port another process holds then stops this node before
	// any other knows it, rather than after it joined (and left again).
	clientLn, httpLn, err := bindPorts(f.listen, f.http)
	if err != nil {
		return err
	}
	defer func() { // the servers own them once handed over; a second Close is harmless
		_ = clientLn.Close()
		_ = httpLn.Close()
	}()
	b, err := broker.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer b.Close()
	generated, err := b.SeedUsers(ctx, f.dev, os.Getenv("MALACHI_ADMIN_PASS"))
	if err != nil {
		return fmt.Errorf("seeding users: %w", err)
	}
	grace := envDuration("MALACHI_SHUTDOWN_GRACE_MS", 5*time.Second)
	srv := server.New(server.Config{
		Addr:            f.listen,
		MaxFrame:        uint32(envInt("MALACHI_MAX_FRAME_SIZE", 16<<20)),
		AuthTimeout:     envDuration("MALACHI_AUTH_TIMEOUT_MS", 10*time.Second),
		IdleTimeout:     envDuration("MALACHI_TCP_RECV_TIMEOUT", 5*time.Minute),
		WriteTimeout:    envDuration("MALACHI_TCP_SEND_TIMEOUT", 30*time.Second),
		MaxConns:        int(envInt("MALACHI_MAX_TOTAL_CONN", 10000)),
		MaxConnsPerIP:   int(envInt("MALACHI_MAX_CONN_PER_IP", 100)),
		MaxPreAuthConns: int(envInt("MALACHI_MAX_PREAUTH_CONN", 0)),
		MaxPreAuthFrame: uint32(envInt("MALACHI_MAX_PREAUTH_FRAME_SIZE", 8<<10)),
		MaxConnBytes:    envInt("MALACHI_MAX_CONN_BYTES", 64<<20),
		ShutdownGrace:   grace,
		Logger:          logger,

		TLSCertFile:       f.tlsCert,
		TLSKeyFile:        f.tlsKey,
		TLSClientCAFile:   f.tlsClientCA,
		TLSOnly:           f.tlsOnly,
		TLSReloadInterval: f.tlsReloadInterval,
	}, b)
	if err := srv.ListenOn(clientLn); err != nil {
		return err
	}
	if f.tlsCert != "" {
		go reloadOnHangup(ctx, srv, logger)
	}
	mopts := metrics.Options{LagEvery: f.metricsLagEvery}
	if !f.metricsNoAuth {
		mopts.Access = b
	}
	m := metrics.New(b, srv, mopts)
	defer m.Close()
	web := httpapi.New(f.http, b, f.pprof, httpapi.WithMetrics(m.Handler()))
	web.ListenOn(httpLn)
	if f.dashboard.resolve(web.Addr(), logger) {
		dash, err := mountDashboard(f, web, srv.Addr(), b, logger)
		if err != nil {
			return err
		}
		defer dash.Close()
	}
	logger.Info("node started", "node", cfg.NodeID, "version", broker.Version, "client", srv.Addr().String(), "http", web.Addr().String())
	printBanner(f, cfg.NodeID, cluster, srv.Addr(), web.Addr(), generated)
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve() }()
	go func() { errc <- web.Serve() }()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	logger.Info("shutting down: draining connections")
	// After the grace, requests of the closed connections get
	// shutdownWait more to return; those still running wait on the
	// node itself (a round waiting for disk space), which the deferred
	// Close ends.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace+shutdownWait)
	defer cancel()
	if serr := srv.Shutdown(shutdownCtx); errors.Is(serr, server.ErrRequestsOutlived) {
		logger.Warn("closing the node with requests still waiting on storage", "err", serr)
	}
	webCtx, webCancel := context.WithTimeout(context.Background(), shutdownWait)
	defer webCancel()
	web.Shutdown(webCtx)
	return err
}

// shutdownWait is how long a stopping node waits, past the grace, for the
// requests of the connections it closed, and for its HTTP server.
const shutdownWait = 10 * time.Second

// bindPorts binds the client protocol's address and the HTTP one.
func bindPorts(client, web string) (net.Listener, net.Listener, error) {
	clientLn, err := net.Listen("tcp", client)
	if err != nil {
		return nil, nil, fmt.Errorf("server: listen %s: %w", client, err)
	}
	httpLn, err := net.Listen("tcp", web)
	if err != nil {
		_ = clientLn.Close()
		return nil, nil, fmt.Errorf("httpapi: listen %s: %w", web, err)
	}
	return clientLn, httpLn, nil
}

// reloadOnHangup reloads the TLS certificate and key on each SIGHUP
// until ctx ends, the way operators rotate certificates without a
// restart. Without TLS SIGHUP keeps its default effect.
func reloadOnHangup(ctx context.Context, srv *server.Server, logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := srv.ReloadTLS(); err != nil {
				logger.Error("SIGHUP: TLS reload failed; the previous certificate stays in use", "err", err)
				continue
			}
			logger.Info("SIGHUP: TLS certificate reloaded")
		}
	}
}

func printBanner(f *serveFlags, name string, cluster *clusterSetting, client, web net.Addr, generated string) {
	fmt.Fprintf(os.Stderr, "malachi %s node %q\n", broker.Version, name)
	fmt.Fprintf(os.Stderr, "  client protocol  %s\n", client)
	if f.tlsCert != "" {
		mode := "TLS or plain TCP"
		if f.tlsOnly {
			mode = "TLS only"
		}
		if f.tlsClientCA != "" {
			mode += ", client certificates verified"
		}
		fmt.Fprintf(os.Stderr, "  tls              %s (certificate %s)\n", mode, f.tlsCert)
	}
	fmt.Fprintf(os.Stderr, "  http             http://%s/health\n", web)
	fmt.Fprintf(os.Stderr, "  data             %s\n", f.dataDir)
	if cluster != nil {
		printClusterBanner(os.Stderr, cluster)
	}
	if f.dev {
		fmt.Fprintln(os.Stderr, "  dev users        admin/admin123 producer/producer123 consumer/consumer123 app/app123")
	}
	if generated != "" {
		fmt.Fprintf(os.Stderr, "  admin password   %s   (generated; shown once — set MALACHI_ADMIN_PASS to choose it)\n", generated)
	}
	fmt.Fprintln(os.Stderr, "ready")
}
