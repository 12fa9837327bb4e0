package auth

import "container/list"

// lru is a map bounded to max entries that evicts the least recently
// touched one when full. Each entry carries the instant it may be
// forgotten, so expired entries are dropped from the old end as the table
// is used, without a sweeper. Not safe for concurrent use.
type lru[K comparable, V any] struct {
	max   int
	byKey map[K]*list.Element
	order *list.List // front: most recently touched
}

type lruEntry[K comparable, V any] struct {
	key      K
	val      V
	forgetAt int64 // unix ms; the entry is dropped from this instant
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{max: max, byKey: make(map[K]*list.Element), order: list.New()}
}

// get returns the entry for k if it is held and not expired at now, and
// marks it recently used.
func (l *lru[K, V]) get(k K, now int64) (*lruEntry[K, V], bool) {
	l.expire(now)
	el, ok := l.byKey[k]
	if !ok {
		return nil, false
	}
	e := el.Value.(*lruEntry[K, V])
	if now >= e.forgetAt {
		l.remove(el)
		return nil, false
	}
	l.order.MoveToFront(el)
	return e, true
}

// put returns k's entry, creating it with val if it is missing. Creating
// an entry in a full table evicts the least recently used one: a flood of
// new keys then costs the oldest keys their history, never memory.
func (l *lru[K, V]) put(k K, val V, now int64) *lruEntry[K, V] {
	if e, ok := l.get(k, now); ok {
		return e
	}
	for l.order.Len() >= l.max {
		l.remove(l.order.Back())
	}
	e := &lruEntry[K, V]{key: k, val: val}
	l.byKey[k] = l.order.PushFront(e)
	return e
}

// delete forgets k.
func (l *lru[K, V]) delete(k K) {
	if el, ok := l.byKey[k]; ok {
		l.remove(el)
	}
}

// expire drops expired entries from the least recently used end. Entries
// further in may have expired too; they go when reached or looked up.
func (l *lru[K, V]) expire(now int64) {
	for el := l.order.Back(); el != nil; el = l.order.Back() {
		if now < el.Value.(*lruEntry[K, V]).forgetAt {
			return
		}
		l.remove(el)
	}
}

func (l *lru[K, V]) remove(el *list.Element) {
	delete(l.byKey, el.Value.(*lruEntry[K, V]).key)
	l.order.Remove(el)
}

func (l *lru[K, V]) len() int { return l.order.Len() }
