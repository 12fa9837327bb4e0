package broker

import (
	"slices"
	"sync"
	"unsafe"

	"github.com/malachi-log/malachi/internal/cursor"
)

// cursorCache remembers the large cursors this node handed out lately,
// decoded, by their text, so a reader that goes on from its last
// page's cursor (a Fetcher, a consumer's loop) is not decoded again. At a
// thousand ranges a decode (base64, MAC and 32 KiB of entries, on every
// page) cost the node about as much as the rest of the page's cursor work.
//
// Only text this node encoded with its secret is held, and the secret is
// set once when the node opens, so a hit is what Decode would return. A
// reader goes on from a cursor once, so a hit takes the text out; the rest
// leave oldest first when the bytes held pass the bound. Entries held here
// are never modified (a page works on a copy: newEntrySet); a hit's entries
// are shared with the page that made them, which only reads them too, and
// have no room to append into.
type cursorCache struct {
	mu         sync.Mutex
	max, used  int
	byText     map[string]*cachedCursor
	head, tail *cachedCursor // oldest first
}

type cachedCursor struct {
	text       string
	c          cursor.Cursor
	size       int // what it holds (cost)
	prev, next *cachedCursor
}

const (
	// cursorCacheBytes bounds what the cache holds: a hundred readers of
	// a topic of 1,024 ranges (about 45 KB a cursor).
	cursorCacheBytes = 8 << 20
	// cursorCacheMinEntries: smaller cursors decode in a few
	// microseconds, less than they would cost to keep.
	cursorCacheMinEntries = 64
	entryBytes            = int(unsafe.Sizeof(cursor.Entry{}))
)

func newCursorCache(maxBytes int) *cursorCache {
	return &cursorCache{max: maxBytes, byText: map[string]*cachedCursor{}}
}

// cost is what a cursor takes to hold: its text, its entries' whole array
// and the rest of its node and map slot, roughly.
func cost(text string, entries []cursor.Entry) int {
	return len(text) + cap(entries)*entryBytes + 128
}

// put remembers c, which text encodes. Cursors of few entries, any one
// larger than a quarter of the bound (it would push out most of the rest),
// and entries not in canonical order (Decode would return them sorted and
// merged) are not kept.
func (cc *cursorCache) put(text string, c cursor.Cursor) {
	entries := c.Entries
	if len(entries) < cursorCacheMinEntries {
		return
	}
	for i := 1; i < len(entries); i++ {
		if cursor.Compare(entries[i-1], entries[i]) >= 0 {
			return
		}
	}
	if cap(entries) > 2*len(entries) {
		// A page's entries can sit in a much larger array (a reader's
		// entries folded after a merge): keep only what they need.
		entries = slices.Clone(entries)
	}
	c.Entries = entries[:len(entries):len(entries)]
	n := &cachedCursor{text: text, c: c, size: cost(text, entries)}
	if n.size > cc.max/4 {
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if old, ok := cc.byText[text]; ok {
		cc.unlink(old)
	}
	cc.byText[text] = n
	cc.used += n.size
	n.prev = cc.tail
	if cc.tail != nil {
		cc.tail.next = n
	} else {
		cc.head = n
	}
	cc.tail = n
	for cc.used > cc.max {
		cc.unlink(cc.head)
	}
}

// take returns and forgets the cursor text encodes, a cursor of topicID.
// A text held for another topic stays, and is not a hit: Decode then says
// why it is refused.
func (cc *cursorCache) take(topicID uint64, text string) (cursor.Cursor, bool) {
	if len(text) > cc.max/4 {
		return cursor.Cursor{}, false // never held: not hashed under the lock
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	n, ok := cc.byText[text]
	if !ok || n.c.TopicID != topicID {
		return cursor.Cursor{}, false
	}
	cc.unlink(n)
	return n.c, true
}

func (cc *cursorCache) unlink(n *cachedCursor) {
	delete(cc.byText, n.text)
	cc.used -= n.size
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		cc.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		cc.tail = n.prev
	}
	n.prev, n.next = nil, nil
}
