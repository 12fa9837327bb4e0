package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"
)

// savedContext is a named set of connection settings, like `nats context`
// or an rpk profile. The password is stored in clear text in a file only
// its owner may read, and is sent only to the context's server (see
// app.settings). File paths are stored absolute.
type savedContext struct {
	Name          string `json:"-"`
	Server        string `json:"server,omitempty"`
	User          string `json:"user,omitempty"`
	Password      string `json:"password,omitempty"`
	Description   string `json:"description,omitempty"`
	TLS           bool   `json:"tls,omitempty"`
	TLSCA         string `json:"tls_ca,omitempty"`
	TLSCert       string `json:"tls_cert,omitempty"`
	TLSKey        string `json:"tls_key,omitempty"`
	TLSServerName string `json:"tls_server_name,omitempty"`
	Auth          string `json:"auth,omitempty"`
	// TokenFile is where to read a token at each connection. Tokens
	// themselves are not saved: they expire.
	TokenFile string `json:"token_file,omitempty"`
}

// hasSecrets reports whether the context holds credentials that must not
// go to another server.
func (c *savedContext) hasSecrets() bool { return c.Password != "" || c.TokenFile != "" }

// withoutSecrets is a copy of c with its password and token file, and a
// token authentication that would need them, removed.
func (c *savedContext) withoutSecrets() *savedContext {
	cp := *c
	cp.Password, cp.TokenFile = "", ""
	if cp.Auth == authToken {
		cp.Auth = ""
	}
	return &cp
}

// contextFile is the whole file: the contexts and which one is current.
type contextFile struct {
	Current  string                   `json:"current,omitempty"`
	Contexts map[string]*savedContext `json:"contexts"`
}

// contextPath is os.UserConfigDir()/malachi/contexts.json.
func contextPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "malachi", "contexts.json"), nil
}

func readContexts() (*contextFile, string, error) {
	path, err := contextPath()
	if err != nil {
		return nil, "", err
	}
	cf := &contextFile{Contexts: map[string]*savedContext{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cf, path, nil
	}
	if err == nil {
		err = json.Unmarshal(b, cf)
	}
	if err != nil {
		return nil, path, fmt.Errorf("reading contexts: %w", err)
	}
	if cf.Contexts == nil {
		cf.Contexts = map[string]*savedContext{}
	}
	for name, c := range cf.Contexts {
		c.Name = name
	}
	return cf, path, nil
}

// write replaces the file atomically, readable by its owner only.
func (cf *contextFile) write(path string) error {
	b, err := json.MarshalIndent(cf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// loadSelectedContext returns the context named, or the current one when
// name is "", or nil when there is none.
func loadSelectedContext(name string) (*savedContext, error) {
	cf, _, err := readContexts()
	if err != nil {
		return nil, &exitError{code: 1, err: err}
	}
	if name == "" {
		name = cf.Current
	}
	if name == "" {
		return nil, nil
	}
	c, ok := cf.Contexts[name]
	if !ok {
		return nil, usageErr("no saved context %q (see 'malachi context list')", name)
	}
	return c, nil
}

func newContextCmd(a *app) *cobra.Command {
	return parentCmd("context", "Save and switch between named connection settings",
		`  malachi context save prod --server prod-1:4040 --user ops --password s3cret
  malachi context use prod
  malachi context list`,
		newContextSaveCmd(a), newContextUseCmd(), newContextListCmd(a), newContextDeleteCmd())
}

func newContextSaveCmd(a *app) *cobra.Command {
	var description string
	cmd := &cobra.Command{
		Use:   "save NAME",
		Short: "Save the connection settings given (or in effect) under a name",
		Long: `Save --server, --user, --password, the --tls* flags, --auth and --token-file
(or the values in effect from the environment, the current context and the
defaults) under NAME. The first context saved becomes the current one.
Settings are stored in ` + "`<user config dir>/malachi/contexts.json`" + `, readable by
you only. A --token is not saved, since tokens expire: save a --token-file.

A context's password and token file are used only with its own server: a
command pointed elsewhere with --server or MALACHI_SERVER needs credentials
of its own, or --use-context-credentials.`,
		Example: `  malachi context save local --server 127.0.0.1:4040 --user admin --password admin123
  malachi context save prod --server prod-1:4040 --user ops --password s3cret --description "production"
  malachi context save secure --server prod-1:4040 --tls-ca ca.pem --tls-cert client.pem --tls-key client-key.pem --auth mtls`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := a.settings()
			if err != nil {
				return err
			}
			saved := &savedContext{
				Server: set.Server, User: set.User, Password: set.Password, Description: description,
				TLS: set.TLS, TLSCA: absPath(set.TLSCA), TLSCert: absPath(set.TLSCert), TLSKey: absPath(set.TLSKey),
				TLSServerName: set.TLSServerName, TokenFile: absPath(set.TokenFile),
			}
			if set.Auth != authPassword {
				saved.Auth = set.Auth
			}
			if set.Withheld != "" {
				// The current context's password belongs to its own
				// server: do not copy it into a context for another.
				saved.Password = ""
				fmt.Fprintf(cmd.ErrOrStderr(), "note: context %s's password and token file are not copied to a context for %s; pass --password to save one\n",
					safeText(set.Context), safeText(set.Server))
			}
			if set.Token != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "note: the token is not saved (tokens expire); save a --token-file instead")
			}
			return updateContexts(func(cf *contextFile) (string, error) {
				name := args[0]
				cf.Contexts[name] = saved
				if cf.Current == "" {
					cf.Current = name
					return fmt.Sprintf("saved context %s (%s as %s) and made it current", name, set.Server, set.User), nil
				}
				return fmt.Sprintf("saved context %s (%s as %s); switch to it with 'malachi context use %s'", name, set.Server, set.User, name), nil
			}, cmd)
		},
	}
	cmd.Flags().StringVar(&description, "description", "", "a note shown by 'context list'")
	return cmd
}

// updateContexts reads the file, applies change and writes it back, then
// prints what change says it did.
func updateContexts(change func(*contextFile) (string, error), cmd *cobra.Command) error {
	cf, path, err := readContexts()
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	msg, err := change(cf)
	if err != nil {
		return err
	}
	if err := cf.write(path); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("saving contexts: %w", err)}
	}
	fmt.Fprintln(cmd.OutOrStdout(), safeText(msg))
	return nil
}

func newContextUseCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "use NAME",
		Short:   "Make a saved context the current one",
		Example: `  malachi context use prod`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return updateContexts(func(cf *contextFile) (string, error) {
				c, ok := cf.Contexts[args[0]]
				if !ok {
					return "", usageErr("no saved context %q (see 'malachi context list')", args[0])
				}
				cf.Current = c.Name
				return fmt.Sprintf("now using context %s (%s as %s)", c.Name, c.Server, c.User), nil
			}, cmd)
		},
	}
}

func newContextDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Forget a saved context",
		Example: `  malachi context delete prod`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return updateContexts(func(cf *contextFile) (string, error) {
				if _, ok := cf.Contexts[args[0]]; !ok {
					return "", usageErr("no saved context %q (see 'malachi context list')", args[0])
				}
				delete(cf.Contexts, args[0])
				if cf.Current == args[0] {
					cf.Current = ""
				}
				return "deleted context " + args[0], nil
			}, cmd)
		},
	}
}

// contextJSON is one context of `context list -o json`; the password is
// left out.
type contextJSON struct {
	Name        string `json:"name"`
	Current     bool   `json:"current"`
	Server      string `json:"server"`
	User        string `json:"user"`
	Auth        string `json:"auth"`
	TLS         bool   `json:"tls"`
	Description string `json:"description"`
}

func newContextListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List saved contexts; the current one is marked with *",
		Example: `  malachi context list`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := a.printer(cmd)
			if err != nil {
				return err
			}
			cf, _, err := readContexts()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			return printContexts(out, cf)
		},
	}
}

func printContexts(out *printer, cf *contextFile) error {
	names := make([]string, 0, len(cf.Contexts))
	for name := range cf.Contexts {
		names = append(names, name)
	}
	sort.Strings(names)
	docs := make([]contextJSON, len(names))
	rows := make([][]string, len(names))
	for i, name := range names {
		c := cf.Contexts[name]
		auth := orDefault(c.Auth, authPassword)
		docs[i] = contextJSON{name, name == cf.Current, c.Server, c.User, auth, c.TLS, c.Description}
		mark := " "
		if name == cf.Current {
			mark = "*"
		}
		tls := "no"
		if c.TLS {
			tls = "yes"
		}
		rows[i] = []string{mark + " " + name, c.Server, c.User, auth, tls, orDefault(c.Description, "-")}
	}
	if out.json {
		return out.doc(docs)
	}
	if len(rows) == 0 {
		out.notef("no saved contexts: save one with 'malachi context save NAME --server HOST:PORT --user USER --password PASS'")
		return nil
	}
	return out.table([]string{"  NAME", "SERVER", "USER", "AUTH", "TLS", "DESCRIPTION"}, rows)
}
