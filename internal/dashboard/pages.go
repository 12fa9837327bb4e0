package dashboard

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// Bounds of what one page asks the node for.
const (
	maxGroupTopics   = 64   // topics whose groups the groups page lists
	maxGroupsPerPage = 256  // groups described on one page
	maxTableRows     = 1000 // rows of the topic page's ranges and segments tables
	maxPictureRanges = 4096 // active ranges of a large topic's keyspace picture
)

// page is what every template gets.
type page struct {
	Title string
	Nav   string // the menu entry to mark
	User  string
	Admin bool
	CSRF  string
	Body  any
}

func (d *Dashboard) page(ss *session, title, nav string, body any) page {
	return page{Title: title, Nav: nav, User: ss.user, Admin: ss.admin, CSRF: ss.csrf, Body: body}
}

var funcs = template.FuncMap{
	"bytes": humanBytes,
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	},
	"ids": func(ids []uint64) string {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = fmt.Sprint(id)
		}
		return strings.Join(s, ", ")
	},
	"join": strings.Join,
	// role turns a raft state ("StateLeader") into a word ("leader").
	"role": func(s string) string { return strings.ToLower(strings.TrimPrefix(s, "State")) },
}

func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(assets, "assets/templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "assets/templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", base, err)
		}
		pages[base] = t
	}
	return pages, nil
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// nodeError answers a failed call to the node: a session the node no
// longer accepts goes back to the login form, a refusal is shown with
// its status, anything else as the node being unreachable.
// withNode runs fn with a connection to the node in the session's name,
// bounded by the page's call timeout; not getting one is answered as the
// page's error.
func (d *Dashboard) withNode(w http.ResponseWriter, r *http.Request, ss *session, fn func(context.Context, *client.Client)) {
	ctx, cancel := d.call(r)
	defer cancel()
	cl, release, err := d.client(ctx, ss, d.peer(r))
	if err != nil {
		d.nodeError(w, r, ss, err)
		return
	}
	defer release()
	fn(ctx, cl)
}

func (d *Dashboard) nodeError(w http.ResponseWriter, r *http.Request, ss *session, err error) {
	if refusedSession(err) || errors.Is(err, errSessionGone) {
		d.sessions.remove(ss)
		d.setCookie(w, r, d.cookieName(r), "", -1)
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	code := http.StatusBadGateway
	switch {
	case errors.Is(err, errBusy):
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, client.ErrRateLimitExceeded):
		code = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "10")
	case errors.Is(err, client.ErrPermissionDenied):
		code = http.StatusForbidden
	case errors.Is(err, client.ErrNoSuchTopic), errors.Is(err, client.ErrNoSuchRange), errors.Is(err, client.ErrNotFound):
		code = http.StatusNotFound
	case isBadRequest(err):
		code = http.StatusBadRequest
	}
	if code == http.StatusBadGateway {
		d.cfg.Logger.Warn("dashboard: call to the node failed", "user", ss.user, "path", r.URL.Path, "err", err)
	}
	d.render(w, code, "error", d.page(ss, "Error", "", err.Error()))
}

func isBadRequest(err error) bool {
	var e *client.Error
	if !errors.As(err, &e) {
		return false
	}
	return !e.Retriable
}

func (d *Dashboard) call(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d.cfg.DialTimeout)
}

// overview: the node, the cluster's nodes and vnodes, and live charts.
type overviewData struct {
	Status     client.Status
	Cluster    *client.ClusterStatus
	ClusterErr string
	Nodes      []nodeRow
	UnderRep   int
}

type nodeRow struct {
	client.ClusterNode
	Self  bool
	Disk  string
	Attrs []string // key=value, sorted, the disk state left out
}

// diskAttr is the gossip attribute a node publishes while its disk is
// full or failing.
const diskAttr = "malachi.disk"

func nodeRows(st *client.ClusterStatus) []nodeRow {
	rows := make([]nodeRow, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		row := nodeRow{ClusterNode: n, Self: n.ID == st.Node, Disk: "ok"}
		for _, k := range slices.Sorted(maps.Keys(n.Attrs)) {
			if k == diskAttr {
				row.Disk = n.Attrs[k]
				continue
			}
			row.Attrs = append(row.Attrs, k+"="+n.Attrs[k])
		}
		rows = append(rows, row)
	}
	return rows
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request, ss *session) {
	d.withNode(w, r, ss, func(ctx context.Context, cl *client.Client) {
		var data overviewData
		var err error
		if data.Status, err = cl.Status(ctx); err != nil {
			d.nodeError(w, r, ss, err)
			return
		}
		if ss.admin {
			st, err := cl.ClusterStatus(ctx)
			if err != nil {
				data.ClusterErr = err.Error()
			} else {
				data.Cluster, data.Nodes = &st, nodeRows(&st)
			}
		} else {
			data.ClusterErr = "The cluster view needs the admin permission."
		}
		d.render(w, http.StatusOK, "overview", d.page(ss, "Overview", "overview", data))
	})
}

func (d *Dashboard) topics(w http.ResponseWriter, r *http.Request, ss *session) {
	d.withNode(w, r, ss, func(ctx context.Context, cl *client.Client) {
		list, err := cl.ListTopics(ctx)
		if err != nil {
			d.nodeError(w, r, ss, err)
			return
		}
		d.render(w, http.StatusOK, "topics", d.page(ss, "Topics", "topics", list))
	})
}

// topicData is the topic page.
type topicData struct {
	Topic    client.TopicDescription
	Keyspace keyspaceView
	Ranges   []rangeRow
	Merges   [][2]uint64 // buddy pairs of active ranges
	Segments []segmentRow
	// How many ranges and segments the topic has; the tables show the
	// first maxTableRows.
	RangesTotal, SegmentsTotal int
	Groups                     []groupRow
	More                       int // groups not described (maxGroupsPerPage)
}

type rangeRow struct {
	client.RangeInfo
	Count uint64 // records
}

type segmentRow struct {
	Range uint64
	client.SegmentInfo
	State string
	Under bool
}

type groupRow struct {
	Topic   string
	Status  client.GroupStatus
	Members client.GroupMembers
	Err     string
}

func (d *Dashboard) topic(w http.ResponseWriter, r *http.Request, ss *session) {
	d.withNode(w, r, ss, func(ctx context.Context, cl *client.Client) {
		// The tables show the first maxTableRows ranges; a larger topic's
		// keyspace picture and merges come from its active ranges, also
		// bounded, so a page costs the same whatever the topic's size.
		desc, err := cl.DescribeTopic(ctx, r.PathValue("name"), client.DescribeLimit(maxTableRows))
		if err != nil {
			d.nodeError(w, r, ss, err)
			return
		}
		picture := &desc
		if desc.Truncated {
			act, err := cl.DescribeTopic(ctx, desc.Name, client.DescribeActiveOnly(), client.DescribeLimit(maxPictureRanges))
			if err != nil {
				d.nodeError(w, r, ss, err)
				return
			}
			picture = &act
		}
		under := map[uint64]bool{}
		if ss.admin {
			if st, err := cl.ClusterStatus(ctx); err == nil && len(st.Nodes) > 0 {
				_, segs := client.UnderReplicated(st, []client.TopicDescription{desc}, 1<<20)
				for _, s := range segs {
					under[s.Segment] = true
				}
			}
		}
		data := topicView(&desc, picture, under)
		groups := desc.Groups
		if len(groups) > maxGroupsPerPage {
			data.More, groups = len(groups)-maxGroupsPerPage, groups[:maxGroupsPerPage]
		}
		data.More += desc.GroupsOmitted
		for _, g := range groups {
			data.Groups = append(data.Groups, describeGroup(ctx, cl, desc.Name, g))
		}
		d.render(w, http.StatusOK, "topic", d.page(ss, "Topic "+desc.Name, "topics", data))
	})
}

// topicView is the topic page's tables, each bounded by maxTableRows;
// the keyspace picture and merges are drawn from picture (desc itself,
// or a large topic's active ranges).
func topicView(desc, picture *client.TopicDescription, under map[uint64]bool) topicData {
	data := topicData{Topic: *desc, Keyspace: keyspace(picture), Merges: buddies(picture.ActiveRanges())}
	data.Merges = data.Merges[:min(len(data.Merges), maxTableRows)]
	data.RangesTotal = max(len(desc.Ranges), desc.RangesTotal)
	for _, rg := range desc.Ranges[:min(len(desc.Ranges), maxTableRows)] {
		data.Ranges = append(data.Ranges, rangeRow{RangeInfo: rg, Count: rg.Records()})
	}
	data.Segments, data.SegmentsTotal = segmentRows(desc, under, maxTableRows)
	return data
}

// segmentRows lists every segment with what can be said of its copies:
// sealed segments are immutable and checksummed, an active replicated one
// is as far as its commit watermark, and one with fewer live replicas
// than its set (in the cluster's view), or a copy damaged, missing or
// being filled, is under-replicated. Each copy's own state (verified,
// unchecked, damaged, healing, missing) is in Copies. It
// makes at most limit rows, and counts all.
func segmentRows(desc *client.TopicDescription, under map[uint64]bool, limit int) ([]segmentRow, int) {
	var rows []segmentRow
	total := 0
	for _, rg := range desc.Ranges {
		total += len(rg.Segments)
		for _, s := range rg.Segments {
			if len(rows) == limit {
				break
			}
			row := segmentRow{Range: rg.ID, SegmentInfo: s, Under: under[s.ID]}
			switch wm, ok := s.Watermark(); {
			case !s.Active:
				row.State = "sealed"
			case ok:
				row.State = fmt.Sprintf("active, committed to %d", wm)
			default:
				row.State = "active"
			}
			for _, c := range s.Copies {
				switch c.State {
				case client.CopyDamaged, client.CopyMissing, client.CopyHealing:
					row.Under = true
				}
			}
			if row.Under {
				row.State += ", under-replicated"
			}
			rows = append(rows, row)
		}
	}
	return rows, total
}

// buddies lists the pairs of active ranges a merge may join: two halves
// of the range that split into them (equal, adjacent, aligned).
func buddies(active []client.RangeInfo) [][2]uint64 {
	byStart := map[uint64]client.RangeInfo{}
	for _, r := range active {
		byStart[r.Start] = r
	}
	var out [][2]uint64
	for _, a := range active {
		size := a.End - a.Start
		if size == 0 || a.Start%(2*size) != 0 {
			continue
		}
		if b, ok := byStart[a.End]; ok && b.End-b.Start == size {
			out = append(out, [2]uint64{a.ID, b.ID})
		}
	}
	return out
}

func describeGroup(ctx context.Context, cl *client.Client, topic, group string) groupRow {
	row := groupRow{Topic: topic}
	st, err := cl.DescribeGroup(ctx, topic, group)
	if err != nil {
		row.Status.Group, row.Err = group, err.Error()
		return row
	}
	row.Status = st
	if m, err := cl.DescribeGroupMembers(ctx, topic, group); err == nil {
		row.Members = m
	} else if !errors.Is(err, client.ErrNotFound) {
		row.Err = err.Error()
	}
	return row
}

// groups lists the groups of every topic the user sees, bounded.
func (d *Dashboard) groups(w http.ResponseWriter, r *http.Request, ss *session) {
	d.withNode(w, r, ss, func(ctx context.Context, cl *client.Client) {
		list, err := cl.ListTopics(ctx)
		if err != nil {
			d.nodeError(w, r, ss, err)
			return
		}
		var data struct {
			Groups []groupRow
			More   bool
		}
		for i, t := range list {
			if i == maxGroupTopics {
				data.More = true
				break
			}
			names, err := cl.ListGroups(ctx, t.Name)
			if err != nil {
				continue // deleted meanwhile, or not readable by this user
			}
			for _, g := range names {
				if len(data.Groups) == maxGroupsPerPage {
					data.More = true
					break
				}
				data.Groups = append(data.Groups, describeGroup(ctx, cl, t.Name, g))
			}
		}
		d.render(w, http.StatusOK, "groups", d.page(ss, "Groups", "groups", data))
	})
}
