//go:build tools

package tools

import (
	_ "github.com/HdrHistogram/hdrhistogram-go"
	_ "github.com/cespare/xxhash/v2"
	_ "github.com/klauspost/compress/s2"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/crypto/argon2"
	_ "golang.org/x/sys/unix"
	_ "golang.org/x/term"
	_ "pgregory.net/rapid"
)
