package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/malachi-log/malachi/internal/cursor"
)

// pageRanges is how many ranges' shares a page holds when its start comes
// from the reader's offsets (firstRange): a page over more ranges gives
// each range it visits 1/pageRanges of itself, so reads stay large (the
// cost of a page follows its records, not the topic's ranges) and every
// range still gets its turn over a window of pages.
//
// A page whose start its reader's last page handed on (position.resume)
// holds turnRanges shares, each four times as large: the pages then take
// the ranges in turns, each page going on where the last one stopped.
// Every page that does not visit every range moves the turn on by at
// least one range (fill), so a range with records is visited at least
// once every n pages over n ranges, and once every n/turnRanges pages
// while the ranges hold more than their shares. A start that firstRange
// derives from the offsets has no such bound: a reader behind whose pages
// all hold q*n records starts each page q ranges on, and a page of c
// shares never reaches some ranges while gcd(q, n) > c; larger shares
// (smaller c) would make that four times as likely. At 1,024 ranges the
// larger shares cut the node's reads of a consume by four and its CPU per
// record by about a fifth.
const (
	pageRanges = 16
	turnRanges = 4
)

// share is one range's share of a page of total, over n ranges; turn says
// the page's start was handed on by the reader's last page.
func share(total, n int, turn bool) int {
	if turn {
		return max(total/min(n, turnRanges), 1)
	}
	return max(total/min(n, pageRanges), 1)
}

// pageRead is what the reads of one page share.
type pageRead struct {
	// ctx bounds the page's reads of other nodes' segments.
	ctx     context.Context
	b       *Broker
	reads   *topicReads
	topicID uint64
	only    []uint64
	set     *entrySet
	lin     lineage
	// gen is the topic's append generation taken before the page's reads.
	gen uint64
	// now is the node clock (unix ms) the page's TTL filter reads by:
	// one instant for the whole page.
	now int64
	// scanLeft is what the page may still read from segments, delivered
	// or not; cut says it ran out (see scanned).
	scanLeft int
	cut      bool
	// refused is the largest batch the range being read left for a later
	// page for want of room (readBatchPage); largest is the largest stored
	// batch the page has seen (wontFit).
	refused, largest int
	// hold keeps the pooled buffers a page of batches was read into
	// (readBatchPage); nil for a page of records.
	hold *readHold
	// unknown is why the first range the page stopped for want of a
	// known end stopped (stopUnknown); nil when none did.
	unknown error
	// carried says the page starts where the reader's last page handed on
	// (position.resume); resume is where this page hands on (fill).
	carried bool
	resume  uint64
}

// after is where the page leaves a reader that was at pos: its entries,
// and the range its next page starts at.
func (pr *pageRead) after(pos position) position {
	pos.entries, pos.resume = pr.set.list(), pr.resume
	return pos
}

// errEndUnknown answers a page that holds no records while some range
// of it stopped where no copy could say whether more is committed (its
// primary gone, a follower's copy at the watermark it learned, before
// the failover): an empty page there would read as caught up (R3).
// Retriable: once the range fails over, its end is known again.
var errEndUnknown = fmt.Errorf("%w: the page is empty and no copy could say where one of its ranges ends", ErrMetadataUnavailable)

// stopUnknown records that a range's read stopped for want of a known
// end, err saying why; the other ranges read on.
func (pr *pageRead) stopUnknown(err error) {
	if pr.unknown == nil {
		pr.unknown = err
	}
}

// endUnknown is the answer to a page that read out: errEndUnknown when
// it holds nothing and a range stopped for want of a known end, else nil.
func (pr *pageRead) endUnknown(out int) error {
	if out > 0 || pr.unknown == nil {
		return nil
	}
	return fmt.Errorf("%w: %v", errEndUnknown, pr.unknown)
}

// scanFactor bounds the bytes one page reads to this many times the
// node's FetchMaxBytes. The page budget counts what it delivers; records
// passed over (expired by TTL, another slice's keys, already read) cost
// reads too, and a topic whose segments hold long runs of them must not
// make one request read all of them.
const scanFactor = 8

// scanned charges n bytes read to the page. Past its bound the page ends
// where the read got to: bg is marked full, so the range is neither read
// on nor taken for read to its end, and the caller returns the page at
// once, records or not, with the cursor moved (cut).
func (pr *pageRead) scanned(n int, bg *budget) bool {
	pr.scanLeft -= n
	if pr.scanLeft > 0 {
		return false
	}
	pr.cut, bg.full = true, true
	return true
}

// startPage takes the topic's read state for a page from pos: the plans to
// read, and the index of the one the page starts at. The state hangs off
// the watch the reader holds, never one looked up again: a topic deleted
// meanwhile must not get a new watch.
func (b *Broker) startPage(ctx context.Context, pos position, at seen) (*pageRead, []*plan, int) {
	reads := b.readsFor(at, pos.topicID, pos.only)
	plans, lin := reads.snapshot(pos.only)
	first, carried := planIndex(plans, pos.resume)
	var resume uint64
	switch {
	case carried:
		resume = pos.resume
	case len(pos.entries) == 0:
		// A reader at the start takes turns from the first range, so its
		// first page's shares are those of the pages after it.
		first, carried = 0, true
	default:
		first = firstRange(pos.entries, len(plans))
	}
	pr := &pageRead{ctx: ctx, b: b, reads: reads, topicID: pos.topicID, only: pos.only, set: newEntrySet(pos.entries), lin: lin, gen: at.gen, now: b.nowMs(),
		scanLeft: scanFactor * b.cfg.FetchMaxBytes, carried: carried, resume: resume}
	return pr, plans, first
}

// planIndex finds the plan of range id (0: none) among plans. A range
// since split or merged has none: the page's start then comes from
// firstRange.
func planIndex(plans []*plan, id uint64) (int, bool) {
	if id == 0 {
		return 0, false
	}
	for i, p := range plans {
		if p.rangeID == id {
			return i, true
		}
	}
	return 0, false
}

// rangeVisit reads one range within the budget of pass 0 (its share) or
// pass 1 (what the page has left), and says whether it ran dry: it
// reached the end of what its plan knows before its budget was spent.
type rangeVisit func(p *plan, pass int) (walkEnd, error)

// walkEnd is how a walk over a range ended.
type walkEnd struct {
	// dry: the walk reached the range's own source's durable end (as far
	// as its plan knows) with budget left; at is that source's offset.
	dry bool
	at  uint64
	// skipped: nothing was read, the range is known to be idle at at.
	skipped bool
	// took: the walk added to the page; spent: it used up its budget.
	took, spent bool
	// unknown: the walk stopped where no copy could vouch for the end of
	// what it read (pageRead.stopUnknown); the range is neither dry nor
	// read again in this page.
	unknown bool
}

// fill reads a page: a first pass visits the ranges in turn from first,
// each up to its share, until the page is spent; a second lets the ranges
// that had more fill the rest. Ranges that ran dry have their plans
// checked against the metadata, and those that changed (a new segment, a
// split or merge) are read again, so a page is never empty while a range
// has durable records. first comes from the reader's own position
// (planIndex of its resume, else firstRange).
//
// The page hands on, in pr.resume, the range its first pass stopped
// before: the next page starts there. A range the pass reached but could
// give nothing for want of room in the page is where it stopped, so that
// range comes first next time; one that took its share, ran dry or had
// nothing is passed. A first pass that visited every range hands on what
// it was handed (nothing when its start came from firstRange), so a page
// that found nothing leaves its reader's cursor as it was.
func (pr *pageRead) fill(plans []*plan, first int, spent func() bool, visit rangeVisit) error {
	var more, dry []*plan
	var at []uint64
	k := 0
	for ; k < len(plans) && !spent(); k++ {
		p := plans[(first+k)%len(plans)]
		end, err := visit(p, 0)
		if err != nil {
			return err
		}
		switch {
		case end.unknown:
		case end.dry && !end.skipped:
			dry, at = append(dry, p), append(at, end.at)
		case !end.dry:
			more = append(more, p)
		}
		// Left with nothing for want of room: it comes first next time.
		// A range whose read the scan bound cut (a run of expired or
		// other slices' records) moved its cursor on and is passed like
		// one that took its share, unless it also left a batch for want
		// of room: holding the turn on a cut range would let one such
		// range starve the others.
		cutOnly := pr.cut && pr.refused == 0
		if !end.took && !end.dry && !end.unknown && !cutOnly && spent() {
			break
		}
	}
	if k < len(plans) {
		pr.resume = plans[(first+k)%len(plans)].rangeID
	}
	for _, p := range more {
		if spent() {
			break
		}
		if _, err := visit(p, 1); err != nil {
			return err
		}
	}
	return pr.recheck(plans, dry, at, spent, visit)
}

// recheck refreshes the plans of the ranges that ran dry. Unchanged ones
// are at their durable end and are marked idle; if any changed and the
// page has room, the changed plans are read.
func (pr *pageRead) recheck(plans, dry []*plan, at []uint64, spent func() bool, visit rangeVisit) error {
	if !pr.b.refresh(pr.reads, pr.topicID, dry) {
		for i, p := range dry {
			if pr.b.appendsFire(p) {
				pr.reads.markIdle(p, at[i], pr.gen)
			}
		}
		return nil
	}
	old := make(map[*plan]bool, len(plans))
	for _, p := range plans {
		old[p] = true
	}
	fresh, lin := pr.reads.snapshot(pr.only)
	pr.lin = lin
	for _, p := range fresh {
		if spent() {
			break
		}
		if old[p] {
			continue
		}
		if _, err := visit(p, 1); err != nil {
			return err
		}
	}
	return nil
}

// appendsFire says whether every append to p's own range after now fires
// the topic's watch here, which is what clears an idle mark: appends this
// node makes, and segments opened elsewhere (through the metadata). An
// append on another node fires it only through a notification, which is
// sent only while a reader here waits and may be lost, so such a range
// is never marked idle: the next read asks its node again.
func (b *Broker) appendsFire(p *plan) bool {
	segs := p.self().segments
	if len(segs) == 0 {
		return true
	}
	last := segs[len(segs)-1]
	return !last.Active || b.firesHere(last)
}

// sourceReader reads one source of a plan from start into out, and says
// the offset reached and whether the source is exhausted: records for
// wire v1, whole batches for v2.
type sourceReader[T any] func(pr *pageRead, p *plan, src *source, entries []cursor.Entry, start uint64, bg *budget, out []T) (uint64, bool, []T, error)

// walkRange reads a plan's sources in lineage order with read, skipping
// those the entries mark done, and advances the entries past what it read.
// It works on the entries of the range's lineage only (see entrySet), and
// skips the store read of a range known to be idle at the reader's offset.
// A read refused for want of a known end (metadata_unavailable) stops the
// range where it got to, keeping what it read, which is committed: below
// a watermark a copy vouched for (stopUnknown).
func walkRange[T any](pr *pageRead, p *plan, bg *budget, out []T, read sourceReader[T]) ([]T, walkEnd, error) {
	ids := p.lineage
	entries := pr.set.take(ids)
	sliceBits := p.slice.Log2Size()
	var end walkEnd
	before := len(out)
	refreshes := 0
	for i := 0; i < len(p.sources); i++ {
		src := &p.sources[i]
		start, done := cursor.Start(entries, src.id, p.slice.Start, sliceBits, sourceBase(src), pr.lin.isAncestor)
		if done {
			continue
		}
		self := i == len(p.sources)-1
		next, exhausted := start, false
		if self && pr.reads.isIdle(p, start, pr.gen) {
			end.skipped = true
		} else {
			var err error
			next, exhausted, out, err = read(pr, p, src, entries, start, bg, out)
			var gone *goneError
			if errors.As(err, &gone) {
				// Retention deleted a segment the plan listed. What was
				// read before it stands; the walk goes on over the range's
				// plan as the metadata has it now, or, when the metadata
				// here still lists the segment, ends this range's walk
				// where it is for a later page to look again.
				if next > start {
					entries = cursor.Advance(entries, src.id, p.slice.Start, sliceBits, next, pr.lin.isAncestor)
				}
				var (
					fresh  *plan
					listed bool
				)
				if refreshes < maxPlanRefreshes {
					refreshes++
					fresh, listed = pr.refreshPlan(p, gone.seg)
				}
				if listed {
					// Not deleted, yet no copy here or elsewhere holds
					// it: the range stops here, retriably, never an
					// empty page that reads as caught up.
					pr.stopUnknown(fmt.Errorf("segment %d is listed but no copy of it was found", gone.seg))
					end.unknown = true
					break
				}
				if fresh == nil {
					break
				}
				p, i = fresh, -1
				continue
			}
			if errors.Is(err, ErrMetadataUnavailable) {
				if next > start {
					entries = cursor.Advance(entries, src.id, p.slice.Start, sliceBits, next, pr.lin.isAncestor)
				}
				pr.stopUnknown(err)
				end.unknown = true
				break
			}
			if err != nil {
				return nil, walkEnd{}, err
			}
		}
		entries = cursor.Advance(entries, src.id, p.slice.Start, sliceBits, next, pr.lin.isAncestor)
		if !exhausted || bg.spent() {
			end.dry, end.at = self && !bg.spent(), next
			break
		}
	}
	pr.set.put(ids, entries)
	end.took, end.spent = len(out) > before, bg.spent()
	return out, end, nil
}
