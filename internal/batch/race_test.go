//go:build race

package batch

// raceEnabled skips allocation counts: under the race detector sync.Pool
// drops items at random.
const raceEnabled = true
