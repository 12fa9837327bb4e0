package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

// statusJSON is `status -o json`.
type statusJSON struct {
	Server  string `json:"server"`
	NodeID  string `json:"node_id"`
	Version string `json:"version"`
	// DataDir is left out when the node does not show it: to a
	// non-administrator on a node with --acl-strict.
	DataDir  string `json:"data_dir,omitempty"`
	UptimeMs int64  `json:"uptime_ms"`
	Topics   int    `json:"topics"`
	Records  uint64 `json:"records"`
	Bytes    uint64 `json:"bytes"`
	// VisibleOnly says the totals count only the topics the caller may
	// see (a non-administrator on a node with --acl-strict).
	VisibleOnly bool `json:"visible_only,omitempty"`
}

func newStatusCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the node's identity, version, data directory, uptime and totals",
		Long: `Show the node's identity, version, data directory, uptime and its totals of
topics, records and bytes.

On a node started with --acl-strict, a user who is not an administrator sees
totals over the topics its grants let it see, and no data directory; any user
may ask, whatever its grants.`,
		Example: `  malachi status
  malachi status -o json | jq .version`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.run(cmd, errSubject{}, func(ctx context.Context, s *session) error {
				st, err := s.c.Status(ctx)
				if err != nil {
					return err
				}
				return printStatus(s, &st)
			})
		},
	}
}

// printStatus prints a status answer. The node leaves the data directory
// out exactly when it narrows the view to the caller's topics (strict ACL
// mode, not an administrator): say so rather than print an empty field and
// totals that look like the node's.
func printStatus(s *session, st *client.Status) error {
	filtered := st.DataDir == ""
	if s.out.json {
		return s.out.doc(statusJSON{
			Server: s.set.Server, NodeID: st.NodeID, Version: st.Version, DataDir: st.DataDir,
			UptimeMs: st.Uptime.Milliseconds(), Topics: st.Topics, Records: st.Records, Bytes: st.Bytes,
			VisibleOnly: filtered,
		})
	}
	dir, scope := st.DataDir, ""
	if filtered {
		dir = "(shown to administrators only)"
		scope = " (in the topics " + s.set.User + " may see)"
	}
	return s.out.fields([][2]string{
		{"Node", st.NodeID},
		{"Server", s.set.Server},
		{"Version", st.Version},
		{"Data dir", dir},
		{"Uptime", humanDuration(st.Uptime)},
		{"Topics", itoa(st.Topics) + scope},
		{"Records", itoa(st.Records) + scope},
		{"Bytes", humanBytes(st.Bytes) + scope},
	})
}
