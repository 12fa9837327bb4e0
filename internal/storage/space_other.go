//go:build !unix

package storage

import "errors"

// statFree is unknown here: only ENOSPC on a journal write marks the disk
// full.
func statFree(string) (int64, error) {
	return 0, errors.New("free space not readable on this platform")
}
