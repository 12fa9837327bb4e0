//go:build race

package server

// raceEnabled scales down tests that move gigabytes: the race detector
// makes every byte copied several times dearer.
const raceEnabled = true
