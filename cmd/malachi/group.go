package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

func newGroupCmd(a *app) *cobra.Command {
	return parentCmd("group", "Inspect, move and delete consumer groups' committed positions",
		`  malachi group list orders
  malachi group describe orders billing
  malachi group seek orders billing --to -1h
  malachi group delete orders billing`,
		newGroupDescribeCmd(a), newGroupListCmd(a), newGroupSeekCmd(a), newGroupDeleteCmd(a))
}

func newGroupSeekCmd(a *app) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "seek TOPIC GROUP",
		Short: "Move a group's committed position: start, end, a time or a cursor",
		Long: `Set a consumer group's committed position, backwards as well as forwards:
--to start (everything again), end (only records produced from now on), an
RFC 3339 time or a duration back from now (-1h: each range's first record at
or after that time, resolved by the node from record timestamps), or a
cursor printed by 'malachi consume'. The group must have no live members.`,
		Example: `  malachi group seek orders billing --to start
  malachi group seek orders billing --to -1h
  malachi group seek orders billing --to 2026-01-02T15:04:05Z
  malachi group seek orders billing --to "$CURSOR"`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, group := args[0], args[1]
			if to == "" {
				return usageErr("--to is required: start, end, a time, -DURATION or a cursor")
			}
			var at time.Time
			if strings.HasPrefix(to, "-") || looksLikeTime(to) {
				t, err := parseFrom(to, time.Now())
				if err != nil {
					return usageErr("--to: %v", err)
				}
				at = t
			}
			return a.run(cmd, errSubject{topic: topic, group: group, existing: true, op: "consume"}, func(ctx context.Context, s *session) error {
				cursor, err := seekTarget(ctx, s.c, topic, to, at)
				if err != nil {
					return err
				}
				if err := s.c.SeekGroup(ctx, topic, group, cursor); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"topic": topic, "group": group, "to": to, "cursor": cursor})
				}
				s.out.textf("moved group %s on %s to %s", group, topic, to)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "start, end, an RFC 3339 time, -DURATION (-1h) or a cursor")
	return cmd
}

// looksLikeTime tells an RFC 3339 time from a cursor, which is opaque
// but never starts with four digits and a dash.
func looksLikeTime(v string) bool {
	return len(v) > 5 && strings.IndexFunc(v[:4], func(r rune) bool { return r < '0' || r > '9' }) < 0 && v[4] == '-'
}

// seekTarget turns --to into the cursor SeekGroup takes.
func seekTarget(ctx context.Context, c *client.Client, topic, to string, at time.Time) (string, error) {
	switch {
	case to == "start":
		return "", nil
	case to == "end":
		return c.EndCursor(ctx, topic)
	case !at.IsZero():
		return c.CursorAt(ctx, topic, at)
	}
	return to, nil
}

func newGroupDeleteCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "delete TOPIC GROUP",
		Short: "Forget a group's committed position on a topic",
		Long: `Delete a consumer group's committed position on a topic; the group starts from
the beginning if it is used again. The group must have no live members.`,
		Example: `  malachi group delete orders billing`,
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, group := args[0], args[1]
			return a.run(cmd, errSubject{topic: topic, group: group, existing: true, op: "consume"}, func(ctx context.Context, s *session) error {
				if err := s.c.DeleteGroup(ctx, topic, group); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"topic": topic, "group": group, "deleted": true})
				}
				s.out.textf("deleted group %s of %s", group, topic)
				return nil
			})
		},
	}
}

// groupJSON is `group describe -o json`.
type groupJSON struct {
	Topic  string         `json:"topic"`
	Group  string         `json:"group"`
	Cursor string         `json:"cursor"` // "" when nothing is committed
	Lag    uint64         `json:"lag"`
	Ranges []rangeLagJSON `json:"ranges"`
	// Skipped counts the records retention deleted that the group's
	// commits passed unread; SkippedBound says it is an upper bound.
	Skipped      uint64 `json:"skipped"`
	SkippedBound bool   `json:"skipped_bound"`
	// Generation and Members are the live membership (describe only).
	Generation *uint64      `json:"generation,omitempty"`
	Members    []memberJSON `json:"members,omitempty"`
}

type memberJSON struct {
	Name     string   `json:"name"`
	Ranges   []uint64 `json:"ranges"`
	LastSeen string   `json:"last_seen"`
}

type rangeLagJSON struct {
	Range uint64 `json:"range"`
	Lag   uint64 `json:"lag"`
}

func newGroupDescribeCmd(a *app) *cobra.Command {
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "describe TOPIC GROUP",
		Short: "Show a group's committed position and its lag in records",
		Long: `Show a consumer group's committed position in a topic (a cursor), its lag
(how many records lie after that position, in all and per active range) and
its live members: each member's ranges and when it was last seen, and the
group's generation, which counts membership changes.

--watch [INTERVAL] redraws it every INTERVAL (default 2s) until Ctrl-C, to
see the lag fall and members come and go: on a terminal each one replaces
the last; into a file or a pipe they follow each other, a blank line apart.`,
		Example: `  malachi group describe orders billing
  malachi group describe orders billing --watch
  malachi group describe orders billing --watch 10s
  malachi group describe orders billing -o json | jq .lag`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWatch(cmd, every); err != nil {
				return err
			}
			topic, group := args[0], args[1]
			return a.run(cmd, errSubject{topic: topic, group: group, existing: true, op: "consume"}, func(ctx context.Context, s *session) error {
				return watch(ctx, s.out, every, func(ctx context.Context, out *printer) error {
					return describeGroup(ctx, s.c, out, topic, group)
				})
			})
		},
	}
	addWatchFlag(cmd, &every)
	return cmd
}

// describeGroup prints one snapshot of group describe.
func describeGroup(ctx context.Context, c *client.Client, out *printer, topic, group string) error {
	g, err := c.DescribeGroup(ctx, topic, group)
	if err != nil {
		return err
	}
	m, err := c.DescribeGroupMembers(ctx, topic, group)
	// A node older than the members request still answers the rest; show
	// what it knows.
	older := errors.Is(err, client.ErrUnknownAPIKey)
	if err != nil && !older && !errors.Is(err, client.ErrNotFound) {
		return err
	}
	if older {
		if out.json {
			return out.doc(toGroupJSON(topic, &g))
		}
		return printGroup(out, topic, &g)
	}
	if out.json {
		j := toGroupJSON(topic, &g)
		j.Generation = &m.Generation
		j.Members = []memberJSON{}
		for _, mb := range m.Members {
			j.Members = append(j.Members, memberJSON{Name: mb.Name, Ranges: nonNil(mb.Ranges), LastSeen: jsonTime(mb.LastSeen)})
		}
		return out.doc(j)
	}
	if err := printGroup(out, topic, &g); err != nil {
		return err
	}
	return printMembers(out, &m, time.Now())
}

func toGroupJSON(topic string, g *client.GroupStatus) groupJSON {
	j := groupJSON{
		Topic: topic, Group: g.Group, Cursor: g.Cursor, Lag: g.Lag, Ranges: make([]rangeLagJSON, len(g.Ranges)),
		Skipped: g.Skipped, SkippedBound: g.SkippedBound,
	}
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
		{"Skipped", skippedText(g.Skipped, g.SkippedBound)},
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

func printMembers(out *printer, m *client.GroupMembers, now time.Time) error {
	out.textf("")
	if len(m.Members) == 0 {
		out.textf("No live members (generation %d)", m.Generation)
		return nil
	}
	out.textf("Members (generation %d)", m.Generation)
	rows := make([][]string, len(m.Members))
	for i, mb := range m.Members {
		rows[i] = []string{mb.Name, orDefault(joinUints(mb.Ranges), "-"), humanDuration(now.Sub(mb.LastSeen)) + " ago"}
	}
	return out.table([]string{"MEMBER", "RANGES", "LAST SEEN"}, rows)
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
			return a.run(cmd, errSubject{topic: topic, op: "consume"}, func(ctx context.Context, s *session) error {
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

// skippedText says how many records retention deleted before the group
// read them: "0 records", or "at most 12 records (deleted by retention
// before the group read them)".
func skippedText(n uint64, bound bool) string {
	if n == 0 {
		return "0 records"
	}
	about := ""
	if bound {
		about = "at most "
	}
	return fmt.Sprintf("%s%d record%s (deleted by retention before the group read them)", about, n, plural(int(min(n, 2))))
}
