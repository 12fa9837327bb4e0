package broker

import (
	"errors"
	"testing"

	"github.com/malachi-log/malachi/internal/control"
)

// W1: the factor of a new segment. A node that cannot read the registry
// (not joined yet) refuses to open a replicated segment rather than
// taking itself for a cluster of one, which would acknowledge produces
// on its single fsync.
func TestClampFactor(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		factor, registered, live int
		regErr                   error
		want                     int
		refused                  bool
	}{
		{name: "all live", factor: 3, registered: 3, live: 3, want: 3},
		{name: "fewer registered", factor: 3, registered: 2, live: 2, want: 2},
		{name: "one registered", factor: 3, registered: 1, live: 1, want: 1},
		{name: "a majority live", factor: 3, registered: 5, live: 2, want: 3},
		{name: "a minority live", factor: 3, registered: 5, live: 1, refused: true},
		{name: "registry unreadable", factor: 3, registered: 0, live: 0, regErr: control.ErrNotJoined, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := clampFactor(tc.factor, tc.registered, tc.live, tc.regErr)
			if tc.refused {
				if err == nil {
					t.Fatalf("factor %d taken, want a refusal", got)
				}
				if tc.regErr != nil && !errors.Is(err, tc.regErr) {
					t.Fatalf("refusal %v does not say why", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("factor %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
