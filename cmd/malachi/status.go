package main

import (
	"context"

	"github.com/spf13/cobra"
)

// statusJSON is `status -o json`.
type statusJSON struct {
	Server   string `json:"server"`
	NodeID   string `json:"node_id"`
	Version  string `json:"version"`
	DataDir  string `json:"data_dir"`
	UptimeMs int64  `json:"uptime_ms"`
	Topics   int    `json:"topics"`
	Records  uint64 `json:"records"`
	Bytes    uint64 `json:"bytes"`
}

func newStatusCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the node's identity, version, data directory, uptime and totals",
		Example: `  malachi status
  malachi status -o json | jq .version`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.run(cmd, errSubject{}, func(ctx context.Context, s *session) error {
				st, err := s.c.Status(ctx)
				if err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(statusJSON{
						Server: s.set.Server, NodeID: st.NodeID, Version: st.Version, DataDir: st.DataDir,
						UptimeMs: st.Uptime.Milliseconds(), Topics: st.Topics, Records: st.Records, Bytes: st.Bytes,
					})
				}
				return s.out.fields([][2]string{
					{"Node", st.NodeID},
					{"Server", s.set.Server},
					{"Version", st.Version},
					{"Data dir", st.DataDir},
					{"Uptime", humanDuration(st.Uptime)},
					{"Topics", itoa(st.Topics)},
					{"Records", itoa(st.Records)},
					{"Bytes", humanBytes(st.Bytes)},
				})
			})
		},
	}
}
