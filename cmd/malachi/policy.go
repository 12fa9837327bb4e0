package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

func newPolicyCmd(a *app) *cobra.Command {
	return parentCmd("policy", "Define storage policies (retention, TTL, segments, placement) and bind topics to them (admin)",
		`  malachi policy define week --max-age 7d --max-bytes 10GiB
  malachi policy bind orders week
  malachi policy get orders
  malachi policy list`,
		newPolicyDefineCmd(a), newPolicyDeleteCmd(a), newPolicyListCmd(a), newPolicyGetCmd(a),
		newPolicyBindCmd(a), newPolicyUnbindCmd(a))
}

// policyFlag is one flag of policy define: the field it sets and how its
// value reads.
type policyFlag struct {
	flag, field string
	kind        policyKind
	usage       string
}

type policyKind int

const (
	kindDuration  policyKind = iota // a duration, or off
	kindSize                        // a size in bytes, or off
	kindCount                       // a count, or off
	kindInt                         // a number, never off
	kindAttr                        // an attribute name, or off
	kindPlacement                   // hard or soft
)

var policyFlags = []policyFlag{
	{"max-age", client.PolicyMaxAge, kindDuration, "delete sealed data older than this (7d, 12h, 0) or off"},
	{"max-bytes", client.PolicyMaxBytes, kindSize, "keep at most this many sealed bytes per range (10GiB, 0) or off"},
	{"max-records", client.PolicyMaxRecords, kindCount, "keep at most this many sealed records per range, or off"},
	{"default-ttl", client.PolicyDefaultTTL, kindDuration, "TTL of records that carry none (1h) or off"},
	{"segment-max-bytes", client.PolicySegmentMaxBytes, kindSize, "roll a segment at this size (at least 4KiB) or off"},
	{"segment-max-age", client.PolicySegmentMaxAge, kindDuration, "roll a segment at this age (at least 1s) or off"},
	{"replicas", client.PolicyReplicas, kindInt, "nodes that keep each segment, 1-16"},
	{"spread-by", client.PolicySpreadBy, kindAttr, "node attribute the replicas spread over (zone, rack) or off"},
	{"min-domains", client.PolicyMinDomains, kindInt, "distinct --spread-by values the replicas must cover, 1-16"},
	{"placement", client.PolicyPlacement, kindPlacement, "hard (refuse when the spread cannot be met) or soft (best effort)"},
}

func newPolicyDefineCmd(a *app) *cobra.Command {
	values := make([]string, len(policyFlags))
	cmd := &cobra.Command{
		Use:   "define NAME",
		Short: "Create a policy, or replace its definition",
		Long: `Create the storage policy NAME, or replace its whole definition. Each flag
given sets one field; a field not given takes the node's default (its
'malachi serve' flags), so "not given", "off" and 0 are three different
things: off switches the rule off whatever the default, 0 is a real bound
(--max-age 0 keeps no sealed data at all).

Durations are Go durations with days allowed (90s, 12h, 7d, 1d12h); sizes are
bytes with an optional unit (4096, 64MiB, 10GB). Retention applies to sealed
segments only, per range. Topics take a policy with 'malachi policy bind' or
'malachi topic create --policy'; redefining a policy changes every topic bound
to it. See docs/retention.md.`,
		Example: `  malachi policy define week --max-age 7d
  malachi policy define capped --max-bytes 10GiB --max-records 1000000
  malachi policy define forever --max-age off --max-bytes off
  malachi policy define events --default-ttl 1h --segment-max-age 10m
  malachi policy define spread --replicas 3 --spread-by zone --min-domains 3 --placement hard`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			fields, err := policyFields(cmd, values)
			if err != nil {
				return err
			}
			return a.run(cmd, errSubject{policy: name, adminOnly: true}, func(ctx context.Context, s *session) error {
				if err := s.c.DefinePolicy(ctx, name, fields); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"policy": name, "defined": true, "fields": fields})
				}
				s.out.textf("defined policy %s: %s", name, fieldsText(fields))
				return nil
			})
		},
	}
	for i, f := range policyFlags {
		cmd.Flags().StringVar(&values[i], f.flag, "", f.usage)
	}
	return cmd
}

// policyFields reads the flags given into a definition.
func policyFields(cmd *cobra.Command, values []string) (map[string]client.PolicyValue, error) {
	fields := map[string]client.PolicyValue{}
	for i, f := range policyFlags {
		if !cmd.Flags().Changed(f.flag) {
			continue
		}
		v, err := parsePolicyValue(f.kind, strings.TrimSpace(values[i]))
		if err != nil {
			return nil, usageErr("--%s %q: %v", f.flag, values[i], err)
		}
		fields[f.field] = v
	}
	return fields, nil
}

func parsePolicyValue(kind policyKind, v string) (client.PolicyValue, error) {
	if v == "off" && kind != kindInt && kind != kindPlacement {
		return client.PolicyOff(), nil
	}
	switch kind {
	case kindDuration:
		d, err := parseDays(v)
		if err != nil {
			return client.PolicyValue{}, fmt.Errorf("want a duration (90s, 12h, 7d) or off")
		}
		return client.PolicyDuration(d), nil
	case kindSize:
		n, err := parseSize(v)
		if err != nil || n < 0 {
			return client.PolicyValue{}, fmt.Errorf("want a size (4096, 64MiB, 10GB) or off")
		}
		return client.PolicyInt(n), nil
	case kindCount, kindInt:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			if kind == kindInt {
				return client.PolicyValue{}, fmt.Errorf("want a whole number")
			}
			return client.PolicyValue{}, fmt.Errorf("want a whole number or off")
		}
		return client.PolicyInt(n), nil
	case kindPlacement:
		if v != "hard" && v != "soft" {
			return client.PolicyValue{}, fmt.Errorf("want hard or soft")
		}
	}
	if v == "" {
		return client.PolicyValue{}, fmt.Errorf("empty; want a name or off")
	}
	return client.PolicyString(v), nil
}

// parseDays is time.ParseDuration that also reads whole days: "7d",
// "1d12h". A negative duration is refused.
func parseDays(v string) (time.Duration, error) {
	var days time.Duration
	if i := strings.IndexByte(v, 'd'); i > 0 {
		n, err := strconv.ParseInt(v[:i], 10, 32)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("not a number of days: %q", v[:i])
		}
		days, v = time.Duration(n)*24*time.Hour, v[i+1:]
		if v == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("not a duration: %q", v)
	}
	return days + d, nil
}

// fieldsText is a definition for people: "max_age_ms=7d max_bytes=off",
// sorted by name, or a word when empty.
func fieldsText(fields map[string]client.PolicyValue) string {
	if len(fields) == 0 {
		return "no fields (every field takes the node's default)"
	}
	parts := make([]string, 0, len(fields))
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		parts = append(parts, name+"="+valueText(name, fields[name]))
	}
	return strings.Join(parts, " ")
}

// valueText renders a field's value: durations for the _ms fields, sizes
// for the byte fields.
func valueText(name string, v client.PolicyValue) string {
	n, isInt := v.Int()
	switch {
	case !isInt:
		return v.String()
	case strings.HasSuffix(name, "_ms"):
		return msText(n)
	case strings.HasSuffix(name, "bytes"):
		return humanBytes(uint64(max(n, 0)))
	}
	return v.String()
}

// msText renders milliseconds as the shortest duration that says them
// exactly: 0, 250ms, 90s, 12h, 7d.
func msText(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	const day = 24 * time.Hour
	switch {
	case ms == 0:
		return "0"
	case ms > int64(1<<62/time.Millisecond):
		return strconv.FormatInt(ms, 10) + "ms"
	case d%day == 0:
		return fmt.Sprintf("%dd", d/day)
	}
	s := d.String()
	for _, zero := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, zero) {
			s = strings.TrimSuffix(s, zero[1:])
		}
	}
	return s
}

func newPolicyDeleteCmd(a *app) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a policy",
		Long: `Delete the storage policy NAME. While a topic is bound to it the delete is
refused; --force deletes it anyway, and the topics bound to it keep the name,
unresolved: retention then deletes nothing on them until they are bound again
('malachi policy get TOPIC' shows it).`,
		Example: `  malachi policy delete week
  malachi policy delete week --force`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			return a.run(cmd, errSubject{policy: name, adminOnly: true}, func(ctx context.Context, s *session) error {
				if err := s.c.DeletePolicy(ctx, name, force); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"policy": name, "deleted": true})
				}
				s.out.textf("deleted policy %s", name)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete even while topics are bound to it (they then expire nothing)")
	return cmd
}

// policyJSON is one policy of `policy list -o json`. A field set off is
// null; a field not in fields takes the node's default.
type policyJSON struct {
	Name      string                        `json:"name"`
	DefinedAt string                        `json:"defined_at"`
	Fields    map[string]client.PolicyValue `json:"fields"`
}

func newPolicyListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the storage policies and their fields",
		Example: `  malachi policy list
  malachi policy list -o json | jq '.[].name'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.run(cmd, errSubject{adminOnly: true}, func(ctx context.Context, s *session) error {
				ps, err := s.c.ListPolicies(ctx)
				if err != nil {
					return err
				}
				if s.out.json {
					docs := make([]policyJSON, len(ps))
					for i, p := range ps {
						docs[i] = policyJSON{Name: p.Name, DefinedAt: jsonTime(p.DefinedAt), Fields: p.Fields}
					}
					return s.out.doc(docs)
				}
				if len(ps) == 0 {
					s.out.notef("no policies yet: define one with 'malachi policy define NAME --max-age 7d'")
					return nil
				}
				now := time.Now()
				rows := make([][]string, len(ps))
				for i, p := range ps {
					rows[i] = []string{p.Name, fieldsText(p.Fields), humanTime(p.DefinedAt, now)}
				}
				return s.out.table([]string{"NAME", "FIELDS", "DEFINED"}, rows)
			})
		},
	}
}

// topicPolicyJSON is `policy get -o json`.
type topicPolicyJSON struct {
	Topic      string                        `json:"topic"`
	Policy     *string                       `json:"policy"` // null when not bound
	Resolution string                        `json:"resolution"`
	Definition map[string]client.PolicyValue `json:"definition"`
	Effective  []effectiveJSON               `json:"effective"`
}

type effectiveJSON struct {
	Name   string             `json:"name"`
	Value  client.PolicyValue `json:"value"`
	Origin string             `json:"origin"`
}

func newPolicyGetCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "get TOPIC",
		Short: "Show the settings in effect for a topic, and where each comes from",
		Long: `Show the policy TOPIC is bound to and every setting in effect for it, with
its origin: "policy" (the bound policy sets it), "global" (the node's
default) or "unresolved" (the topic is bound to a policy deleted with
--force: retention is off until it is bound again).`,
		Example: `  malachi policy get orders
  malachi policy get orders -o json | jq '.effective[] | select(.origin == "policy")'`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			return a.run(cmd, errSubject{topic: topic, existing: true, adminOnly: true}, func(ctx context.Context, s *session) error {
				tp, err := s.c.TopicPolicy(ctx, topic)
				if err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(toTopicPolicyJSON(&tp))
				}
				return printTopicPolicy(s.out, &tp)
			})
		},
	}
}

func toTopicPolicyJSON(tp *client.TopicPolicy) topicPolicyJSON {
	j := topicPolicyJSON{Topic: tp.Topic, Resolution: tp.Resolution, Definition: tp.Definition, Effective: make([]effectiveJSON, len(tp.Effective))}
	if tp.Policy != "" {
		j.Policy = &tp.Policy
	}
	if j.Definition == nil {
		j.Definition = map[string]client.PolicyValue{}
	}
	for i, f := range tp.Effective {
		j.Effective[i] = effectiveJSON{Name: f.Name, Value: f.Value, Origin: f.Origin}
	}
	return j
}

func printTopicPolicy(out *printer, tp *client.TopicPolicy) error {
	policy := "none (every field takes the node's default)"
	switch tp.Resolution {
	case "resolved":
		policy = tp.Policy
	case "unresolved":
		policy = tp.Policy + " (not defined: retention is off until the topic is bound again)"
	}
	if err := out.fields([][2]string{{"Topic", tp.Topic}, {"Policy", policy}}); err != nil {
		return err
	}
	rows := make([][]string, len(tp.Effective))
	for i, f := range tp.Effective {
		rows[i] = []string{f.Name, valueText(f.Name, f.Value), f.Origin}
	}
	out.textf("")
	return out.table([]string{"FIELD", "VALUE", "ORIGIN"}, rows)
}

func newPolicyBindCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "bind TOPIC NAME",
		Short: "Bind a topic to a policy",
		Long: `Bind TOPIC to the storage policy NAME, replacing any binding it had. The
fields NAME sets apply to the topic at once (retention at the next sweep);
the others take the node's default.`,
		Example: `  malachi policy bind orders week`,
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, name := args[0], args[1]
			return a.run(cmd, errSubject{topic: topic, policy: name, existing: true, adminOnly: true}, func(ctx context.Context, s *session) error {
				if err := s.c.BindPolicy(ctx, topic, name); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"topic": topic, "policy": name, "bound": true})
				}
				s.out.textf("bound topic %s to policy %s", topic, name)
				return nil
			})
		},
	}
}

func newPolicyUnbindCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "unbind TOPIC",
		Short:   "Remove a topic's policy: it takes the node's defaults",
		Example: `  malachi policy unbind orders`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			return a.run(cmd, errSubject{topic: topic, existing: true, adminOnly: true}, func(ctx context.Context, s *session) error {
				if err := s.c.UnbindPolicy(ctx, topic); err != nil {
					return err
				}
				if s.out.json {
					return s.out.doc(map[string]any{"topic": topic, "policy": nil, "bound": false})
				}
				s.out.textf("topic %s has no policy: every field takes the node's default", topic)
				return nil
			})
		},
	}
}
