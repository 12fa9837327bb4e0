package dashboard

import (
	"fmt"

	"github.com/malachi-log/malachi/pkg/client"
)

// The keyspace picture: the topic's key space runs left to right; each
// range is a bar over the keys it owns, one row per generation (a range
// made by a split or merge sits one row below its deepest parent), with a
// line from each parent to each child. Active ranges are filled, sealed
// ones outlined. It is drawn on the server as SVG markup, so the page
// needs no script for it.

const (
	ksWidth   = 960.0
	ksRowH    = 52.0
	ksBarH    = 24.0
	ksTop     = 22.0
	ksMaxBars = 512 // the newest ranges drawn; older ones are counted
	ksMaxRows = 24  // deeper generations share the last row
)

type keyspaceView struct {
	Width, Height float64
	// ViewX, ViewW: the viewBox leaves room for the end labels.
	ViewX, ViewW float64
	Bars         []ksBar
	Links        []ksLink
	Ticks        []ksTick
	Hidden       int // ranges left out (ksMaxBars)
}

type ksBar struct {
	X, Y, W, H float64
	ID         uint64
	Active     bool
	Label      bool // wide enough for its id
	TX, TY     float64
	Title      string
}

type ksLink struct{ X1, Y1, X2, Y2 float64 }

type ksTick struct {
	X     float64
	Label string
}

func keyspace(d *client.TopicDescription) keyspaceView {
	space := float64(uint64(1) << d.KeyspaceBits)
	ranges := d.Ranges
	v := keyspaceView{Width: ksWidth, ViewX: -24, ViewW: ksWidth + 48}
	if len(ranges) > ksMaxBars {
		v.Hidden = len(ranges) - ksMaxBars
		ranges = ranges[len(ranges)-ksMaxBars:]
	}
	row := map[uint64]int{}
	at := map[uint64]int{} // range id -> index in v.Bars
	rows := 1
	for _, r := range ranges {
		level := 0
		for _, p := range r.Parents {
			if l, ok := row[p]; ok {
				level = max(level, l+1)
			}
		}
		level = min(level, ksMaxRows-1)
		row[r.ID] = level
		rows = max(rows, level+1)
		x := float64(r.Start) / space * ksWidth
		w := max(float64(r.End-r.Start)/space*ksWidth, 1)
		y := ksTop + float64(level)*ksRowH
		state := "sealed"
		if r.Active {
			state = "active"
		}
		b := ksBar{
			X: x, Y: y, W: w, H: ksBarH, ID: r.ID, Active: r.Active,
			Label: w >= 28, TX: x + w/2, TY: y + ksBarH/2 + 4,
			Title: fmt.Sprintf("range %d, keys [%d, %d), %s, %d records", r.ID, r.Start, r.End, state, r.Records()),
		}
		for _, p := range r.Parents {
			if i, ok := at[p]; ok {
				pb := v.Bars[i]
				v.Links = append(v.Links, ksLink{X1: pb.X + pb.W/2, Y1: pb.Y + pb.H, X2: b.X + b.W/2, Y2: b.Y})
			}
		}
		at[r.ID] = len(v.Bars)
		v.Bars = append(v.Bars, b)
	}
	v.Height = ksTop + float64(rows)*ksRowH
	for i := 0; i <= 4; i++ {
		v.Ticks = append(v.Ticks, ksTick{X: float64(i) / 4 * ksWidth, Label: fmt.Sprint(uint64(space) / 4 * uint64(i))})
	}
	return v
}
