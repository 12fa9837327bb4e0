package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/malachi-log/malachi/pkg/client"
)

// The administrator's actions. Each is a POST to /action with the
// session's CSRF token; the first POST answers a confirmation page that
// repeats the action, and only a second POST with confirm=yes runs it
// (deleting a topic also wants the topic's name typed). The node refuses
// them to users without the permission, whatever the page showed.

type actionForm struct {
	Action string // create, delete, split, merge
	Topic  string
	Range  uint64 // split
	A, B   uint64 // merge
	Ranges int    // create: initial ranges
	What   string // the sentence the confirmation page asks about
	Typed  bool   // the confirmation wants the topic's name typed
	Error  string
}

var actionAudit = map[string]string{
	"create": "topic_created", "delete": "topic_deleted", "split": "range_split", "merge": "ranges_merged",
}

func parseAction(f url.Values) (actionForm, error) {
	a := actionForm{Action: f.Get("action"), Topic: f.Get("topic")}
	if _, ok := actionAudit[a.Action]; !ok {
		return a, fmt.Errorf("unknown action %q", a.Action)
	}
	if a.Topic == "" {
		return a, fmt.Errorf("a topic name is required")
	}
	num := func(k string) (uint64, error) {
		n, err := strconv.ParseUint(f.Get(k), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: want a number, got %q", k, f.Get(k))
		}
		return n, nil
	}
	var err error
	switch a.Action {
	case "create":
		a.Ranges = 1
		if v := f.Get("ranges"); v != "" {
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 1 {
				return a, fmt.Errorf("ranges: want a positive number, got %q", v)
			}
			a.Ranges = n
		}
		a.What = fmt.Sprintf("Create topic %q with %d range(s)?", a.Topic, a.Ranges)
	case "delete":
		a.What = fmt.Sprintf("Delete topic %q, its records and its groups' positions? This cannot be undone.", a.Topic)
		a.Typed = true
	case "split":
		a.Range, err = num("range")
		a.What = fmt.Sprintf("Split range %d of topic %q into two halves?", a.Range, a.Topic)
	case "merge":
		if a.A, err = num("a"); err == nil {
			a.B, err = num("b")
		}
		a.What = fmt.Sprintf("Merge ranges %d and %d of topic %q into one?", a.A, a.B, a.Topic)
	}
	return a, err
}

func (d *Dashboard) action(w http.ResponseWriter, r *http.Request, ss *session) {
	a, err := parseAction(r.PostForm)
	if err != nil {
		d.render(w, http.StatusBadRequest, "error", d.page(ss, "Error", "", err.Error()))
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		d.render(w, http.StatusOK, "confirm", d.page(ss, "Confirm", "", a))
		return
	}
	if a.Typed && r.PostForm.Get("typed") != a.Topic {
		a.Error = "Type the topic's name exactly to delete it."
		d.render(w, http.StatusUnprocessableEntity, "confirm", d.page(ss, "Confirm", "", a))
		return
	}
	d.withNode(w, r, ss, func(ctx context.Context, cl *client.Client) {
		next := "/topics/" + url.PathEscape(a.Topic)
		detail := map[string]string{}
		switch a.Action {
		case "create":
			detail["ranges"] = strconv.Itoa(a.Ranges)
			err = cl.CreateTopic(ctx, a.Topic, client.WithRanges(a.Ranges))
		case "delete":
			next = "/topics"
			err = cl.DeleteTopic(ctx, a.Topic)
		case "split":
			detail["range"] = strconv.FormatUint(a.Range, 10)
			_, err = cl.SplitRange(ctx, a.Topic, a.Range)
		case "merge":
			detail["ranges"] = fmt.Sprint(a.A, ",", a.B)
			_, err = cl.MergeRanges(ctx, a.Topic, a.A, a.B)
		}
		d.audit(Event{Type: actionAudit[a.Action], User: clip(ss.user), Peer: d.peer(r), Target: a.Topic, Detail: detail, Err: err})
		if err != nil {
			d.nodeError(w, r, ss, err)
			return
		}
		http.Redirect(w, r, next, http.StatusSeeOther)
	})
}
