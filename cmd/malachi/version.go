package main

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/pkg/client"
)

// clientVersion is this binary's release; the node reports its own.
var clientVersion = broker.Version

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show this client's version and the node's, if it can be reached",
		Long: `Show this client's version and, if the node at --server answers, the node's.
An unreachable node is reported, not an error: the client version is still
useful. 'malachi --version' prints the client version alone.`,
		Example: `  malachi version
  malachi version -o json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := a.printer(cmd)
			if err != nil {
				return err
			}
			node, server, reason := nodeVersion(cmd.Context(), a)
			if out.json {
				doc := map[string]any{"client": clientVersion, "go": runtime.Version(), "server": server, "node": node}
				if reason != "" {
					doc["node_error"] = reason
				}
				return out.doc(doc)
			}
			if node == "" {
				node = "unknown: " + reason
			}
			return out.fields([][2]string{
				{"Client", "malachi " + clientVersion + " (" + runtime.Version() + ")"},
				{"Node", node + " at " + server},
			})
		},
	}
}

// nodeVersion asks the node for its version; reason says why it could
// not when the version is "".
func nodeVersion(ctx context.Context, a *app) (version, server, reason string) {
	set, err := a.settings()
	if err != nil {
		return "", set.Server, err.Error()
	}
	if set.Withheld != "" {
		return "", set.Server, set.Withheld
	}
	opts, err := set.clientOptions()
	if err != nil {
		return "", set.Server, err.Error()
	}
	c, err := client.Dial(ctx, set.Server, opts...)
	if err != nil {
		return "", set.Server, explainText(err, errSubject{set: set})
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		return "", set.Server, explainText(err, errSubject{set: set})
	}
	return st.Version, set.Server, ""
}

// completionTimeout bounds the node queries behind shell completion: a
// shell waits for them at every TAB.
const completionTimeout = 2 * time.Second

// completeNames is a ValidArgsFunction. Each entry of kinds says what the
// positional argument at that index names: "topic", "group" (of the
// topic given first), "policy" or "context". Failures complete nothing: a TAB must
// never print an error into the command line.
func completeNames(a *app, kinds ...string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if len(args) >= len(kinds) {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		switch kinds[len(args)] {
		case "context":
			if cf, _, err := readContexts(); err == nil {
				for name := range cf.Contexts {
					names = append(names, name)
				}
			}
		case "topic", "group", "policy":
			names = nodeNames(cmd.Context(), a, kinds[len(args)], args)
		}
		slices.Sort(names)
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// nodeNames lists topics, or the groups of args[0], from the node.
func nodeNames(ctx context.Context, a *app, kind string, args []string) []string {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	set, err := a.settings()
	if err != nil || set.Withheld != "" {
		return nil
	}
	opts, err := set.clientOptions()
	if err != nil {
		return nil
	}
	c, err := client.Dial(ctx, set.Server, opts...)
	if err != nil {
		return nil
	}
	defer c.Close()
	switch kind {
	case "group":
		groups, _ := c.ListGroups(ctx, args[0])
		return groups
	case "policy":
		ps, _ := c.ListPolicies(ctx)
		names := make([]string, len(ps))
		for i, p := range ps {
			names[i] = p.Name
		}
		return names
	}
	topics, err := c.ListTopics(ctx)
	if err != nil {
		return nil
	}
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	return names
}
