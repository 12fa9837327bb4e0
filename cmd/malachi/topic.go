package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

func newTopicCmd(a *app) *cobra.Command {
	return parentCmd("topic", "Create, inspect, split, merge and delete topics",
		`  malachi topic create orders --ranges 4
  malachi topic list
  malachi topic describe orders
  malachi topic split orders`,
		newTopicCreateCmd(a), newTopicListCmd(a), newTopicDescribeCmd(a),
		newTopicDeleteCmd(a), newTopicSplitCmd(a), newTopicMergeCmd(a))
}

func newTopicCreateCmd(a *app) *cobra.Command {
	var ranges, replicas int
	var bits uint8
	var policy string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic",
		Long: `Create a topic. Its keyspace (2^keyspace-bits key positions) is tiled by
--ranges ranges, which split and merge online later, so this is only a head
start for a topic known to be busy. --policy binds the new topic to a
storage policy ('malachi policy define'), which must exist; like 'malachi
policy bind', it needs an administrator.`,
		Example: `  malachi topic create orders
  malachi topic create clicks --ranges 8 --keyspace-bits 20
  malachi topic create payments --replicas 5
  malachi topic create audit --policy week`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			// The wire reads 0 as "the default, 1", which would turn a
			// typo into a topic of the wrong shape without a word.
			if ranges < 1 || ranges&(ranges-1) != 0 {
				return usageErr("--ranges must be a power of two (1, 2, 4, ...), not %d", ranges)
			}
			if replicas < 0 || replicas > maxSegmentReplicas {
				return usageErr("--replicas %d: want 1 to %d, or 0 for the cluster's default", replicas, maxSegmentReplicas)
			}
			return a.run(cmd, errSubject{topic: name, policy: policy, op: "create", adminOnly: policy != ""}, func(ctx context.Context, s *session) error {
				opts := []client.TopicOption{client.WithRanges(ranges), client.WithKeyspaceBits(bits)}
				if replicas > 0 {
					opts = append(opts, client.WithReplicas(replicas))
				}
				if policy != "" {
					opts = append(opts, client.WithPolicy(policy))
				}
				if err := s.c.CreateTopic(ctx, name, opts...); err != nil {
					return err
				}
				if s.out.json {
					doc := map[string]any{"topic": name, "created": true}
					if policy != "" {
						doc["policy"] = policy
					}
					return s.out.doc(doc)
				}
				if policy != "" {
					s.out.textf("created topic %s with policy %s", name, policy)
				} else {
					s.out.textf("created topic %s", name)
				}
				s.out.notef("next: produce to it with 'malachi produce %s'", name)
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&ranges, "ranges", 1, "initial number of ranges (a power of two)")
	cmd.Flags().IntVar(&replicas, "replicas", 0, "nodes of a cluster that keep each segment, 1-16 (default: the cluster's --segment-replicas, 3)")
	cmd.Flags().StringVar(&policy, "policy", "", "bind the topic to this storage policy (see 'malachi policy')")
	cmd.Flags().Uint8Var(&bits, "keyspace-bits", 0, "keyspace size as a power of two, 1-32 (default: the server's, 16)")
	return cmd
}

// topicListJSON is one topic of `topic list -o json`.
type topicListJSON struct {
	Name         string `json:"name"`
	KeyspaceBits uint8  `json:"keyspace_bits"`
	ActiveRanges int    `json:"active_ranges"`
	Ranges       int    `json:"ranges"`
	Segments     int    `json:"segments"`
	Records      uint64 `json:"records"`
	Bytes        uint64 `json:"bytes"`
}

func newTopicListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List topics with their ranges, records and bytes",
		Example: `  malachi topic list
  malachi topic list -o json | jq -r '.[].name'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.run(cmd, errSubject{}, func(ctx context.Context, s *session) error {
				topics, err := s.c.ListTopics(ctx)
				if err != nil {
					return err
				}
				if len(topics) == 0 && !s.out.json {
					return noTopicsNote(ctx, s)
				}
				return printTopicList(s.out, topics)
			})
		},
	}
}

// noTopicsNote says why the list is empty. On a node with --acl-strict a
// user who is not an administrator sees only the topics its grants match
// (status then shows no data directory), so "create one" would be wrong:
// the topics may exist, and the user may not create any.
func noTopicsNote(ctx context.Context, s *session) error {
	st, err := s.c.Status(ctx)
	if err == nil && st.DataDir == "" {
		s.out.notef("no topics visible to %s: this node lists only the topics a user's grants match; "+
			"an admin can grant one with 'malachi acl grant %s consume TOPIC'", s.set.User, s.set.User)
		return nil
	}
	s.out.notef("no topics yet: create one with 'malachi topic create NAME'")
	return nil
}

func printTopicList(out *printer, topics []client.TopicSummary) error {
	if out.json {
		docs := make([]topicListJSON, len(topics))
		for i, t := range topics {
			docs[i] = topicListJSON{t.Name, t.KeyspaceBits, t.ActiveRanges, t.Ranges, t.Segments, t.Records, t.Bytes}
		}
		return out.doc(docs)
	}
	if len(topics) == 0 {
		out.notef("no topics yet: create one with 'malachi topic create NAME'")
		return nil
	}
	rows := make([][]string, len(topics))
	for i, t := range topics {
		rows[i] = []string{t.Name, rangesCell(t.ActiveRanges, t.Ranges), itoa(t.Segments),
			itoa(t.Records), humanBytes(t.Bytes), itoa(t.KeyspaceBits)}
	}
	return out.table([]string{"NAME", "RANGES", "SEGMENTS", "RECORDS", "BYTES", "KEYSPACE BITS"}, rows)
}

// rangesCell shows the active ranges, and the sealed ones when there are
// any: "4" or "3 (+2 sealed)".
func rangesCell(active, all int) string {
	if all <= active {
		return itoa(active)
	}
	return fmt.Sprintf("%d (+%d sealed)", active, all-active)
}

func newTopicDescribeCmd(a *app) *cobra.Command {
	var (
		every  time.Duration
		active bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a topic's ranges, segments, records and bytes",
		Long: `Show a topic: each range with the slice of the keyspace it owns, its parents
(the ranges it was split or merged from) and its segments with their replica
sets, records, bytes and state. Sealed ranges stay readable through their
children.

A topic of any size can be described: the node answers by pages, in range id
order, and the command asks for them all. --active lists the active ranges
only; --limit N stops after N ranges (the summary still counts them all).

--watch [INTERVAL] redraws the description every INTERVAL (default 2s) until
Ctrl-C: on a terminal each one replaces the last; into a file or a pipe they
follow each other, a blank line apart.`,
		Example: `  malachi topic describe orders
  malachi topic describe orders --watch
  malachi topic describe orders --watch 500ms
  malachi topic describe orders --active --limit 100
  malachi topic describe orders -o json | jq '.ranges[] | select(.active)'`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWatch(cmd, every); err != nil {
				return err
			}
			if limit < 0 {
				return usageErr("--limit is a number of ranges, 0 for all, not %d", limit)
			}
			opts := []client.DescribeOption{client.DescribeLimit(limit)}
			if active {
				opts = append(opts, client.DescribeActiveOnly())
			}
			return a.run(cmd, errSubject{topic: args[0], existing: true, op: "consume"}, func(ctx context.Context, s *session) error {
				return watch(ctx, s.out, every, func(ctx context.Context, out *printer) error {
					d, err := s.c.DescribeTopic(ctx, args[0], opts...)
					if err != nil {
						return err
					}
					if out.json {
						return out.doc(describeJSON(&d))
					}
					return printDescription(out, &d, time.Now())
				})
			})
		},
	}
	addWatchFlag(cmd, &every)
	cmd.Flags().BoolVar(&active, "active", false, "list only the active ranges")
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many ranges (0: all)")
	return cmd
}

func newTopicDeleteCmd(a *app) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a topic, its records and its groups' positions",
		Long: `Delete a topic with all its records and its groups' committed positions.
On a terminal it asks first; --yes skips the question.`,
		Example: `  malachi topic delete orders
  malachi topic delete orders --yes`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !yes && isTerminal(os.Stdin) && !confirm(cmd, fmt.Sprintf("Delete topic %s and all its records?", name)) {
				return &exitError{code: 1, err: fmt.Errorf("not deleted (answer y, or pass --yes)")}
			}
			return a.run(cmd, errSubject{topic: name, existing: true, adminOnly: true}, func(ctx context.Context, s *session) error {
				if err := s.c.DeleteTopic(ctx, name); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"topic": name, "deleted": true})
				}
				s.out.textf("deleted topic %s", name)
				return nil
			})
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// confirm asks a yes/no question on the terminal; only "y" or "yes" agree.
func confirm(cmd *cobra.Command, question string) bool {
	fmt.Fprintf(cmd.ErrOrStderr(), "%s [y/N] ", safeText(question))
	line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes"
}

func newTopicSplitCmd(a *app) *cobra.Command {
	var rangeID uint64
	cmd := &cobra.Command{
		Use:   "split NAME",
		Short: "Split a range of a topic in two, online",
		Long: `Split an active range into its two halves while producers and consumers
keep running; every key's records stay in order. Without --range the server
picks the range holding the most bytes.`,
		Example: `  malachi topic split orders
  malachi topic split orders --range 3`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			return a.run(cmd, errSubject{topic: name, existing: true, adminOnly: true}, func(ctx context.Context, s *session) error {
				children, err := s.c.SplitRange(ctx, name, rangeID)
				if err != nil {
					return err
				}
				split := rangeID
				if split == 0 {
					// The node picked the range; its children name it as
					// their parent.
					split = splitParent(ctx, s.c, name, children)
				}
				if s.out.json {
					return s.out.doc(map[string]any{"topic": name, "range": split, "children": children})
				}
				what := "range " + itoa(split)
				if split == 0 {
					what = "the busiest range"
				}
				s.out.textf("split %s of %s into ranges %s", what, name, joinUints(children))
				return nil
			})
		},
	}
	cmd.Flags().Uint64Var(&rangeID, "range", 0, "the range to split (default: the one holding the most bytes)")
	return cmd
}

func newTopicMergeCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "merge NAME ID ID",
		Short: "Merge two sibling ranges of a topic into one, online",
		Long: `Merge two active ranges that are the two halves of one block (the children of
one split, for instance) into a single range, online.`,
		Example: `  malachi topic merge orders 5 6`,
		Args:    exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			ids, err := parseRangeIDs(args[1:])
			if err != nil {
				return err
			}
			return a.run(cmd, errSubject{topic: name, existing: true, adminOnly: true}, func(ctx context.Context, s *session) error {
				child, err := s.c.MergeRanges(ctx, name, ids[0], ids[1])
				if err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"topic": name, "ranges": ids, "child": child})
				}
				s.out.textf("merged ranges %d and %d of %s into range %d", ids[0], ids[1], name, child)
				return nil
			})
		},
	}
}

func parseRangeIDs(args []string) ([]uint64, error) {
	ids := make([]uint64, len(args))
	for i, s := range args {
		id, err := strconv.ParseUint(s, 10, 64)
		if err != nil || id == 0 {
			return nil, usageErr("range ids are positive integers, not %q (see 'malachi topic describe')", s)
		}
		ids[i] = id
	}
	return ids, nil
}

// splitParent returns the range that was split into children, 0 if the
// topic's description does not say (it changed meanwhile).
func splitParent(ctx context.Context, c *client.Client, topic string, children []uint64) uint64 {
	if len(children) == 0 {
		return 0
	}
	d, err := c.DescribeTopic(ctx, topic)
	if err != nil {
		return 0
	}
	for _, r := range d.Ranges {
		if r.ID == children[0] && len(r.Parents) == 1 {
			return r.Parents[0]
		}
	}
	return 0
}
