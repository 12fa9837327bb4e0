//go:build !race

package storage

// poisonReleased is off in ordinary builds: overwriting every released
// buffer would cost what pooling saves.
const poisonReleased = false
