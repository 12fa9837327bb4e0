package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

func newGroupCmd(a *app) *cobra.Command {
	return parentCmd("group", "Inspect consumer groups: committed positions and lag",
		`  malachi group list orders
  malachi group describe orders billing`,
		newGroupDescribeCmd(a), newGroupListCmd(a))
}

// groupJSON is `group describe -o json`.
type groupJSON struct {
	Topic  string         `json:"topic"`
	Group  string         `json:"group"`
	Cursor string         `json:"cursor"` // "" when nothing is committed
	Lag    uint64         `json:"lag"`
	Ranges []rangeLagJSON `json:"ranges"`
}

type rangeLagJSON struct {
	Range uint64 `json:"range"`
	Lag   uint64 `json:"lag"`
}

func newGroupDescribeCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "describe TOPIC GROUP",
		Short: "Show a group's committed position and its lag in records",
		Long: `Show a consumer group's committed position in a topic (a cursor) and its lag:
how many records lie after that position, in all and per active range.`,
		Example: `  malachi group describe orders billing
  malachi group describe orders billing -o json | jq .lag`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, group := args[0], args[1]
			return a.run(cmd, errSubject{topic: topic}, func(ctx context.Context, s *session) error {
				g, err := s.c.DescribeGroup(ctx, topic, group)
				if err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(toGroupJSON(topic, &g))
				}
				return printGroup(s.out, topic, &g)
			})
		},
	}
}

func toGroupJSON(topic string, g *client.GroupStatus) groupJSON {
	j := groupJSON{Topic: topic, Group: g.Group, Cursor: g.Cursor, Lag: g.Lag, Ranges: make([]rangeLagJSON, len(g.Ranges))}
	for i, r := range g.Ranges {
		j.Ranges[i] = rangeLagJSON{Range: r.Range, Lag: r.Lag}
	}
	return j
}

func printGroup(out *printer, topic string, g *client.GroupStatus) error {
	position := g.Cursor
	if position == "" {
		position = "nothing yet (the group starts at the beginning)"
	}
	err := out.fields([][2]string{
		{"Group", g.Group},
		{"Topic", topic},
		{"Lag", fmt.Sprintf("%d record%s", g.Lag, plural(int(g.Lag)))},
		{"Committed", position},
	})
	if err != nil || len(g.Ranges) == 0 {
		return err
	}
	rows := make([][]string, len(g.Ranges))
	for i, r := range g.Ranges {
		rows[i] = []string{itoa(r.Range), itoa(r.Lag)}
	}
	out.textf("")
	return out.table([]string{"RANGE", "LAG"}, rows)
}

func newGroupListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "list TOPIC",
		Aliases: []string{"ls"},
		Short:   "List a topic's consumer groups with their lag",
		Example: `  malachi group list orders`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			return a.run(cmd, errSubject{topic: topic}, func(ctx context.Context, s *session) error {
				return listGroups(ctx, s, topic)
			})
		},
	}
}

// listGroups names the groups with each one's lag: a list of names alone
// would send everyone straight on to describe.
func listGroups(ctx context.Context, s *session, topic string) error {
	names, err := s.c.ListGroups(ctx, topic)
	if err != nil {
		return err
	}
	docs := make([]groupJSON, len(names))
	for i, name := range names {
		g, err := s.c.DescribeGroup(ctx, topic, name)
		if err != nil {
			return err
		}
		docs[i] = toGroupJSON(topic, &g)
	}
	if s.out.json {
		return s.out.doc(docs)
	}
	if len(docs) == 0 {
		s.out.notef("no groups on %s yet: 'malachi consume %s --group NAME --commit' makes one", topic, topic)
		return nil
	}
	rows := make([][]string, len(docs))
	for i, d := range docs {
		committed := "yes"
		if d.Cursor == "" {
			committed = "no"
		}
		rows[i] = []string{d.Group, itoa(d.Lag), committed}
	}
	return s.out.table([]string{"GROUP", "LAG", "COMMITTED"}, rows)
}
