//go:build race

package storage

// poisonReleased: with the race detector on (as tests run), released read
// buffers are overwritten so that bytes used after their release are
// wrong, not stale-but-plausible.
const poisonReleased = true
