//go:build race

package client

// raceEnabled skips buffer counts: under the race detector sync.Pool drops
// items at random.
const raceEnabled = true
