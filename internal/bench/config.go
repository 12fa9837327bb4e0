package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// Mode is a workload.
type Mode string

// The workloads.
const (
	Produce Mode = "produce"
	Consume Mode = "consume"
	E2E     Mode = "e2e"
)

// How consumers read.
const (
	// ViaFetch: every consumer reads the whole topic with its own cursor.
	ViaFetch = "fetch"
	// ViaGroup: the consumers are members of one group and share the
	// topic through push subscriptions.
	ViaGroup = "group"
)

// stampBytes is the size of the origin time stamped at the start of every
// value that has room for it.
const stampBytes = 8

// Config describes one run. The zero values of the optional fields take
// the defaults noted.
type Config struct {
	Mode  Mode   `json:"mode"`
	Topic string `json:"topic"`
	// Records is how many records are produced (produce, e2e) or to read
	// (consume: per consumer via fetch, in all via group).
	Records int64 `json:"records"`
	// Size is the value size in bytes (e2e needs at least 8).
	Size int `json:"size"`
	// Keys is the key cardinality: record i gets key "k<i mod Keys>"; 0
	// sends records without a key.
	Keys int `json:"keys"`
	// Producers and Consumers are the worker counts, each worker with its
	// own connection (default 1).
	Producers int `json:"producers"`
	Consumers int `json:"consumers"`
	// Batch bounds the records of one produce request and Linger how long
	// a batch waits to fill (0 = client defaults; a negative Linger sends
	// at once). Ignored with Sync.
	Batch  int           `json:"batch"`
	Linger time.Duration `json:"linger_ns"`
	// Rate is the open-loop target in records/s over all producers; 0 is
	// closed loop.
	Rate float64 `json:"rate"`
	// Sync sends one record per request and waits for its ack.
	Sync bool `json:"sync"`
	// Compression is the codec of the batches async producers build:
	// "none" (the default, also ""), "zstd" or "s2". It needs wire v2;
	// Sync sends single records, which it does not apply to.
	Compression string `json:"compression"`
	// Ranges is the range count of a topic this run creates (0 = broker
	// default). An existing topic is used as it is.
	Ranges int `json:"ranges"`
	// Via is ViaFetch (default) or ViaGroup.
	Via string `json:"via"`
	// Group names the group of ViaGroup (default: a fresh name per run).
	Group string `json:"group,omitempty"`
	// Window and PageMax tune subscriptions and fetches (0 = 1000 each):
	// PageMax bounds the records of a pushed page and of a wire v1 fetch.
	Window  int `json:"window"`
	PageMax int `json:"page_max"`
	// MaxBytes bounds the stored bytes of a wire v2 fetch page (0 = the
	// node's default, which is also its cap).
	MaxBytes int `json:"max_bytes"`
	// Idle ends a consumer that has received nothing for this long with
	// ErrShort (default 10 s).
	Idle time.Duration `json:"idle_ns"`
}

// Defaults for the optional fields.
const (
	DefaultWindow  = 1000
	DefaultPageMax = 1000
	DefaultIdle    = 10 * time.Second
)

// ErrConfig marks an invalid Config.
var ErrConfig = errors.New("bench: invalid configuration")

// withDefaults fills in the defaults and checks the result.
func (c Config) withDefaults() (Config, error) {
	c.Producers = max(c.Producers, 1)
	c.Consumers = max(c.Consumers, 1)
	if c.Via == "" {
		c.Via = ViaFetch
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.PageMax <= 0 {
		c.PageMax = DefaultPageMax
	}
	if c.Idle <= 0 {
		c.Idle = DefaultIdle
	}
	if c.Compression == "" {
		c.Compression = "none"
	}
	return c, c.check()
}

func (c Config) check() error {
	switch {
	case c.Mode != Produce && c.Mode != Consume && c.Mode != E2E:
		return fmt.Errorf("%w: unknown mode %q", ErrConfig, c.Mode)
	case c.Topic == "":
		return fmt.Errorf("%w: a topic is required", ErrConfig)
	case c.Records <= 0:
		return fmt.Errorf("%w: records must be positive", ErrConfig)
	case c.Size < 0, c.Keys < 0, c.Batch < 0, c.Rate < 0, c.Ranges < 0, c.MaxBytes < 0:
		return fmt.Errorf("%w: size, keys, batch, rate, ranges and max-bytes cannot be negative", ErrConfig)
	case c.Mode == E2E && c.Size < stampBytes:
		return fmt.Errorf("%w: e2e needs a size of at least %d bytes to carry the send time", ErrConfig, stampBytes)
	case c.Via != ViaFetch && c.Via != ViaGroup:
		return fmt.Errorf("%w: via must be %q or %q", ErrConfig, ViaFetch, ViaGroup)
	case c.Rate > 0 && c.Rate < float64(c.Producers)/3600:
		return fmt.Errorf("%w: rate too low for %d producers", ErrConfig, c.Producers)
	}
	if _, ok := codecs[c.Compression]; !ok {
		return fmt.Errorf("%w: compression must be none, zstd or s2, not %q", ErrConfig, c.Compression)
	}
	if c.Compression != "none" && c.Sync {
		return fmt.Errorf("%w: compression applies to the batches of async producers, not to --sync", ErrConfig)
	}
	return nil
}

// codecs maps Config.Compression to the client's codecs.
var codecs = map[string]client.Codec{
	"none": client.CompressionNone,
	"zstd": client.CompressionZstd,
	"s2":   client.CompressionS2,
}

// share splits n items among workers: worker w gets share(n, w, workers),
// and the shares add up to n.
func share(n int64, w, workers int) int64 {
	q, r := n/int64(workers), n%int64(workers)
	if int64(w) < r {
		q++
	}
	return q
}
