package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/malachi-log/malachi/pkg/client"
)

// Defaults of the global flags. The credentials are the ones `malachi
// serve --dev` seeds, so a development node works with no flags at all.
const (
	defaultServer   = "127.0.0.1:4040"
	defaultUser     = "admin"
	defaultPassword = "admin123"
	defaultTimeout  = 10 * time.Second
)

// app holds the global client flags. Every client command reads them
// through settings, which merges flags, environment and the saved context.
type app struct {
	flags    *pflag.FlagSet // root's persistent flags
	server   string
	user     string
	password string
	output   string
	context  string
	timeout  time.Duration
	wire     wireFlag
	secure   secureFlags
	// useContextCreds sends a saved context's password or token to a
	// server other than the context's.
	useContextCreds bool
}

// addClientCommands registers the commands that talk to a node, and the
// global flags they share, on root.
func addClientCommands(root *cobra.Command) {
	a := &app{flags: root.PersistentFlags()}
	a.register(a.flags)
	root.SetFlagErrorFunc(flagError)
	root.Long = `Malachi is a durable log broker: producers write records to topics by key,
consumers read them back with opaque cursors or as consumer groups.

'malachi serve' runs a node; every other command talks to one, at --server
(default ` + defaultServer + `) as --user (default the dev admin, ` + defaultUser + `/` + defaultPassword + `).
They speak wire v2 where the node does (records travel in stored batches,
compressed with 'produce --compression'), else wire v1; --wire v1 keeps to
the record-by-record protocol of v1 with any node.`
	root.Example = `  malachi serve --dev
  malachi topic create orders --ranges 4
  printf 'user-1\tcreated\n' | malachi produce orders --kv
  malachi consume orders --from start`
	// A runnable root whose Args reject strays turns "unknown command" into
	// a usage error (exit 2) instead of cobra's plain error.
	root.Args = unknownSubcommand
	root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	root.AddCommand(
		newTopicCmd(a), newProduceCmd(a), newConsumeCmd(a), newGroupCmd(a),
		newUserCmd(a), newACLCmd(a), newStatusCmd(a), newContextCmd(a),
		newPolicyCmd(a), newBenchCmd(a), newVersionCmd(a), newAdminCmd(), newClusterCmd(a), newTopCmd(a), newSegmentCmd(a),
	)
	root.Version = clientVersion
	root.SetVersionTemplate("malachi {{.Version}}\n")
	addCompletions(root, a)
}

// completions says what the positional arguments of each command name,
// for shell completion ('malachi completion --help').
var completions = map[string][]string{
	"consume":        {"topic"},
	"produce":        {"topic"},
	"topic describe": {"topic"},
	"topic delete":   {"topic"},
	"topic split":    {"topic"},
	"topic merge":    {"topic"},
	"group list":     {"topic"},
	"group describe": {"topic", "group"},
	"group seek":     {"topic", "group"},
	"group delete":   {"topic", "group"},
	"context use":    {"context"},
	"context delete": {"context"},
	"policy delete":  {"policy"},
	"policy get":     {"topic"},
	"policy bind":    {"topic", "policy"},
	"policy unbind":  {"topic"},
}

func addCompletions(root *cobra.Command, a *app) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.TrimPrefix(c.CommandPath(), root.Name()+" ")
		if kinds, ok := completions[path]; ok {
			c.ValidArgsFunction = completeNames(a, kinds...)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func (a *app) register(fs *pflag.FlagSet) {
	fs.StringVar(&a.server, "server", defaultServer, "node address host:port (env MALACHI_SERVER)")
	fs.StringVar(&a.user, "user", defaultUser, "user name (env MALACHI_USER)")
	fs.StringVar(&a.password, "password", defaultPassword, "password (env MALACHI_PASSWORD)")
	fs.StringVarP(&a.output, "output", "o", "text", "output format: text or json")
	fs.StringVar(&a.context, "context", "", "use this saved context instead of the current one (env MALACHI_CONTEXT)")
	fs.DurationVar(&a.timeout, "timeout", defaultTimeout, "how long to wait to connect and for each answer")
	a.wire = wireFlag(defaultWire)
	fs.Var(&a.wire, "wire", "wire protocol version: v2 (batch-native produce and fetch; v1 with nodes that lack it) or v1 (record by record)")
	a.secure.register(fs)
	fs.BoolVar(&a.useContextCreds, "use-context-credentials", false, "send the saved context's password or token even to a --server other than the context's")
}

// settings are the effective connection parameters of one command.
type settings struct {
	Server   string
	User     string
	Password string
	Timeout  time.Duration
	// Wire is the wire protocol version the client speaks, 1 or 2.
	Wire int
	// Context names the saved context they came from, "" for none.
	Context string

	// TLS and the files and name it uses; see secureFlags.
	TLS           bool
	TLSCA         string
	TLSCert       string
	TLSKey        string
	TLSServerName string
	// Auth is authPassword, authMTLS or authToken; the token is Token, or
	// read from TokenFile at each connection.
	Auth      string
	Token     string
	TokenFile string

	// Withheld, when not empty, says why the saved context's password or
	// token is not used: the command points at another server and gave
	// no credentials of its own. run refuses to go on.
	Withheld string
}

// settings merges, highest first: flags set on the command line, the
// environment, the selected saved context, the defaults. A context's
// password and token are used only with the context's own server, unless
// --use-context-credentials says otherwise.
func (a *app) settings() (settings, error) {
	s := settings{Server: defaultServer, User: defaultUser, Password: defaultPassword, Timeout: a.timeout, Wire: int(a.wire)}
	name := a.pick("context", a.context, "MALACHI_CONTEXT", "")
	ctx, err := loadSelectedContext(name)
	if err != nil {
		return s, err
	}
	ctxServer := defaultServer
	if ctx != nil {
		ctxServer = orDefault(ctx.Server, defaultServer)
	}
	s.Server = a.pick("server", a.server, "MALACHI_SERVER", ctxServer)
	if ctx != nil {
		s.Context = ctx.Name
		s.User = orDefault(ctx.User, s.User)
		if ctx.hasSecrets() && !a.useContextCreds && !sameServer(s.Server, ctxServer) {
			// The secrets stay behind; the rest of the context (user name,
			// TLS files, none of them secret) still applies.
			ctx = ctx.withoutSecrets()
			if !a.credentialsGiven() {
				s.Withheld = fmt.Sprintf("context %s belongs to %s, and its saved credentials are not sent to %s: "+
					"pass --user and --password (or --token, --token-file, --auth mtls), or --use-context-credentials to send them anyway",
					s.Context, ctxServer, s.Server)
			}
		}
		s.Password = orDefault(ctx.Password, s.Password)
	}
	s.User = a.pick("user", a.user, "MALACHI_USER", s.User)
	s.Password = a.pick("password", a.password, "MALACHI_PASSWORD", s.Password)
	_, pwFrom := pickFrom(a.flags, "password", a.password, "MALACHI_PASSWORD", "")
	if err := resolveSecurity(a.flags, &a.secure, ctx, pwFrom >= fromEnv, &s); err != nil {
		return s, err
	}
	if s.Timeout <= 0 {
		return s, usageErr("--timeout must be positive")
	}
	return s, nil
}

// credentialsGiven reports whether the command line or the environment
// says how to authenticate, so that a context's secrets are not needed.
func (a *app) credentialsGiven() bool {
	for _, fe := range [][2]string{
		{"user", "MALACHI_USER"}, {"password", "MALACHI_PASSWORD"}, {"auth", "MALACHI_AUTH"},
		{"token", "MALACHI_TOKEN"}, {"token-file", "MALACHI_TOKEN_FILE"},
	} {
		if _, from := pickFrom(a.flags, fe[0], "", fe[1], ""); from >= fromEnv {
			return true
		}
	}
	return false
}

// pick returns the flag's value if it was set, else the environment
// variable's if set, else def.
func (a *app) pick(flag, value, env, def string) string {
	v, _ := pickFrom(a.flags, flag, value, env, def)
	return v
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// session is one command's connection and output.
type session struct {
	c   *client.Client
	set settings
	out *printer
}

// run dials the node, runs f and turns whatever f returns into the one
// line main prints. subject names what the command is about, for hints.
func (a *app) run(cmd *cobra.Command, subject errSubject, f func(ctx context.Context, s *session) error) error {
	out, err := a.printer(cmd)
	if err != nil {
		return err
	}
	set, err := a.settings()
	if err != nil {
		return err
	}
	if set.Withheld != "" {
		return usageErr("%s", set.Withheld)
	}
	subject.set = set
	opts, err := set.clientOptions()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	c, err := client.Dial(ctx, set.Server, opts...)
	if err != nil {
		return explain(err, subject)
	}
	defer c.Close()
	if err := f(ctx, &session{c: c, set: set, out: out}); err != nil {
		return explain(err, subject)
	}
	return nil
}

// printer checks --output and returns the command's printer.
func (a *app) printer(cmd *cobra.Command) (*printer, error) {
	switch a.output {
	case "text", "json":
	default:
		return nil, usageErr("--output is text or json, not %q", a.output)
	}
	return &printer{json: a.output == "json", w: cmd.OutOrStdout(), errw: cmd.ErrOrStderr()}, nil
}

// usageErr is a mistake in the command line: exit code 2.
func usageErr(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// flagError makes flag parsing failures usage errors with a pointer to
// the command's help.
func flagError(cmd *cobra.Command, err error) error {
	return usageErr("%v (see '%s --help')", err, cmd.CommandPath())
}

// unknownSubcommand is the Args of commands that only group others.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usageErr("%s (see '%s --help')", msg, cmd.CommandPath())
}

// parentCmd returns a command that only groups subcommands: run bare, it
// prints its help; with a stray word, it fails as a usage error.
func parentCmd(use, short, example string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args:    unknownSubcommand,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(subs...)
	return cmd
}

// exactArgs requires the positional arguments the command's Use names.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == n {
			return nil
		}
		return usageErr("%s takes %d argument%s, got %d: usage: %s",
			cmd.CommandPath(), n, plural(n), len(args), strings.TrimSuffix(cmd.UseLine(), " [flags]"))
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// errInterrupted ends a command the user stopped with Ctrl-C.
var errInterrupted = errors.New("interrupted")
