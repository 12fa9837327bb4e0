package main

import (
	"fmt"
	"strconv"

	"github.com/malachi-log/malachi/pkg/client"
)

// defaultWire is the wire protocol version client commands speak unless
// --wire says otherwise.
const defaultWire = 2

// wireFlag is the global --wire: exactly "v1" or "v2". Anything else fails
// flag parsing, which makes it a usage error (exit 2) for every command.
type wireFlag int

func (w *wireFlag) String() string { return "v" + strconv.Itoa(int(*w)) }

func (w *wireFlag) Type() string { return "v1|v2" }

func (w *wireFlag) Set(s string) error {
	switch s {
	case "v1":
		*w = 1
	case "v2":
		*w = 2
	default:
		return fmt.Errorf("the wire version is v1 or v2")
	}
	return nil
}

// codecs are the values of --compression.
var codecs = map[string]client.Codec{
	"none": client.CompressionNone,
	"zstd": client.CompressionZstd,
	"s2":   client.CompressionS2,
}

// parseCompression checks --compression against the wire version: batches
// are compressed only on wire v2, and a v1 client would send the records
// uncompressed without saying so.
func parseCompression(name string, wire int) (client.Codec, error) {
	c, ok := codecs[name]
	switch {
	case !ok:
		return 0, usageErr("--compression is none, zstd or s2, not %q", name)
	case c != client.CompressionNone && wire == 1:
		return 0, usageErr("--compression %s needs wire v2: wire v1 sends records uncompressed", name)
	}
	return c, nil
}
