package client

import (
	"context"
	"fmt"

	"github.com/malachi-log/malachi/internal/wire"
)

// DescribeOption tunes DescribeTopic and DescribeTopicPage.
type DescribeOption func(*describeConfig)

type describeConfig struct {
	activeOnly bool
	limit      int
	pageSize   int
}

// defaultDescribePage is the ranges asked per page; the node may send
// fewer (it bounds a page's bytes) and caps it at 10,000.
const defaultDescribePage = 1000

// DescribeActiveOnly leaves sealed ranges out of the description.
func DescribeActiveOnly() DescribeOption { return func(c *describeConfig) { c.activeOnly = true } }

// DescribeLimit stops DescribeTopic after n ranges (0: no limit), setting
// TopicDescription.Truncated when the topic has more.
func DescribeLimit(n int) DescribeOption { return func(c *describeConfig) { c.limit = max(n, 0) } }

// DescribePageSize sets the ranges asked per page (default 1,000).
func DescribePageSize(n int) DescribeOption {
	return func(c *describeConfig) {
		if n > 0 {
			c.pageSize = n
		}
	}
}

func describeOptions(opts []DescribeOption) describeConfig {
	cfg := describeConfig{pageSize: defaultDescribePage}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// TopicPage is one page of a topic's description: the topic's fields,
// the page's ranges (ascending by id) and, on the first page, its groups.
// Next is the token of the next page, "" after the last.
type TopicPage struct {
	TopicDescription
	Next string
}

// DescribeTopic returns a topic's ranges, segments and groups, or
// ErrNoSuchTopic. From a node that describes by pages it asks page after
// page until the last (or DescribeLimit): a range that exists for the
// whole paging is listed once, in id order, whatever splits and merges
// happen meanwhile; ranges created meanwhile may be listed too. A node
// whose pages do not move forward (the token it was sent back, or ranges
// not after the previous page's) is an ErrProtocol. From an older node
// the whole topic comes in one answer, which for a topic too large for a
// frame is ErrDescribeTooLarge.
func (c *Client) DescribeTopic(ctx context.Context, name string, opts ...DescribeOption) (TopicDescription, error) {
	cfg := describeOptions(opts)
	var (
		d     TopicDescription
		token string
		pg    pager
	)
	for {
		size := cfg.pageSize
		if cfg.limit > 0 && !cfg.activeOnly {
			// With active ranges only, a node's scan follows the size
			// asked: a smaller page would pass over fewer sealed ranges
			// and take more of them, so the limit trims afterwards.
			size = min(size, cfg.limit-len(d.Ranges))
		}
		p, err := c.describePage(ctx, name, token, cfg.activeOnly, size)
		if err != nil {
			return TopicDescription{}, err
		}
		if err := pg.check(token, &p); err != nil {
			return TopicDescription{}, opError("describe_topic", name, err)
		}
		if pg.pages == 1 {
			d = p.TopicDescription
		} else {
			d.Ranges = append(d.Ranges, p.Ranges...)
			d.CopiesOmitted += p.CopiesOmitted
			d.RangesTotal, d.ActiveRangesTotal = p.RangesTotal, p.ActiveRangesTotal
		}
		if cfg.limit > 0 && len(d.Ranges) >= cfg.limit {
			d.Truncated = p.Next != "" || len(d.Ranges) > cfg.limit
			d.Ranges = d.Ranges[:cfg.limit]
			return d, nil
		}
		if p.Next == "" {
			return d, nil
		}
		token = p.Next
		if err := ctx.Err(); err != nil {
			return TopicDescription{}, err
		}
	}
}

// pager checks that the pages of one description move forward: each
// page's ranges ascend past the previous page's last, its token is not
// the one it was asked with, and there are no more pages than the topic
// has ranges (a page with a token passes over at least one), with slack
// for ranges created meanwhile.
type pager struct {
	pages   int
	last    uint64
	mostIDs int
}

// pageSlack is the pages allowed beyond the most ranges a node reported.
const pageSlack = 64

func (g *pager) check(token string, p *TopicPage) error {
	g.pages++
	if token != "" && p.Next == token {
		return fmt.Errorf("%w: the page after token %q points to itself", ErrProtocol, token)
	}
	for i := range p.Ranges {
		if id := p.Ranges[i].ID; id <= g.last {
			return fmt.Errorf("%w: range %d listed after range %d (page %d)", ErrProtocol, id, g.last, g.pages)
		}
		g.last = p.Ranges[i].ID
	}
	g.mostIDs = max(g.mostIDs, p.RangesTotal)
	if p.Next != "" && g.pages > g.mostIDs+g.mostIDs/2+pageSlack {
		return fmt.Errorf("%w: %d pages of a topic of %d ranges, and still a next page", ErrProtocol, g.pages, g.mostIDs)
	}
	return nil
}

// DescribeTopicPage returns one page of a topic's description: token ""
// asks for the first, then each page's Next. A page holds at most the
// DescribePageSize ranges, fewer when the node bounds its bytes (or, with
// DescribeActiveOnly, when it passed over many sealed ranges; such a page
// may even be empty with a Next). A token from another topic, or from a
// topic deleted and created again since, is ErrInvalidPageToken. A node
// that does not describe by pages answers the whole topic as one page.
func (c *Client) DescribeTopicPage(ctx context.Context, name, token string, opts ...DescribeOption) (TopicPage, error) {
	cfg := describeOptions(opts)
	return c.describePage(ctx, name, token, cfg.activeOnly, cfg.pageSize)
}

func (c *Client) describePage(ctx context.Context, name, token string, activeOnly bool, size int) (TopicPage, error) {
	var (
		whole wire.DescribeTopicResponse
		page  wire.DescribeTopicPageResponse
		paged bool
	)
	_, err := c.doPick(ctx, func(cn *conn) (request, error) {
		req := wire.DescribeTopicRequest{Topic: str(name)}
		if cn.wire.topicCopies {
			req.Flags = wire.FlagCopies
		}
		if paged = cn.wire.topicPages; !paged {
			if token != "" {
				return request{}, opError("describe_topic", name, ErrInvalidPageToken)
			}
			return request{req: req, resp: &whole, resend: true}, nil
		}
		req.Flags |= wire.FlagPaged
		if activeOnly {
			req.Flags |= wire.FlagActiveOnly
		}
		if token != "" {
			req.PageToken = str(token)
		}
		req.MaxRanges = uint32(min(size, maxPageRanges))
		return request{req: req, resp: &page, resend: true}, nil
	})
	if err != nil {
		return TopicPage{}, err
	}
	if !paged {
		return wholeAsPage(&whole, activeOnly), nil
	}
	p := TopicPage{TopicDescription: TopicDescription{
		ID: page.ID, Name: page.Name, KeyspaceBits: page.Bits, CreatedAt: msTime(page.CreatedAt),
		Groups: page.Groups, GroupsOmitted: int(page.GroupsOmitted), CopiesOmitted: page.CopiesOmitted, Ranges: make([]RangeInfo, len(page.Ranges)),
		RangesTotal: int(page.RangesTotal), ActiveRangesTotal: int(page.ActiveRanges),
	}}
	for i := range page.Ranges {
		p.Ranges[i] = toRangeInfo(&page.Ranges[i])
	}
	if page.Next != nil {
		p.Next = *page.Next
	}
	return p, nil
}

// maxPageRanges is the most ranges a page request asks for; a node caps
// a page there anyway.
const maxPageRanges = 10_000

// wholeAsPage is an older node's whole description as the only page.
func wholeAsPage(w *wire.DescribeTopicResponse, activeOnly bool) TopicPage {
	d := TopicDescription{
		ID: w.ID, Name: w.Name, KeyspaceBits: w.Bits, CreatedAt: msTime(w.CreatedAt), Groups: w.Groups,
		CopiesOmitted: w.CopiesOmitted, RangesTotal: len(w.Ranges),
	}
	for i := range w.Ranges {
		if w.Ranges[i].Active {
			d.ActiveRangesTotal++
		}
		if activeOnly && !w.Ranges[i].Active {
			continue
		}
		d.Ranges = append(d.Ranges, toRangeInfo(&w.Ranges[i]))
	}
	return TopicPage{TopicDescription: d}
}
