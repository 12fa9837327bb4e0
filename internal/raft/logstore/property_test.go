package logstore

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/malachi-log/malachi/internal/vfs"
)

// TestStoreMatchesMemoryStorage drives the store and raft.MemoryStorage
// with the same random writes, clean reopens, kill -9s at any change to
// the disk and power losses, and checks after every step that the store
// answers exactly as the model of what it acknowledged.
func TestStoreMatchesMemoryStorage(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		intn := func(n int) int { return rapid.IntRange(0, n-1).Draw(rt, "n") }
		g := gen{intn: intn, groups: 4, bigEvery: 12}
		opts := Options{FileBytes: int64(rapid.IntRange(512, 8<<10).Draw(rt, "fileBytes"))}
		p := &proc{t: rt, opts: opts, h: &history{model: model{}}}
		p.start(vfs.NewMem())
		defer func() { p.s.Close() }()
		rt.Repeat(map[string]func(*rapid.T){
			"write": func(*rapid.T) { p.write(g) },
			"reopen": func(*rapid.T) {
				mustClose(rt, p.s)
				p.start(p.k.mem)
			},
			"kill": func(*rapid.T) {
				p.k.arm(intn(12))
				for range 1 + intn(3) {
					if !p.write(g) {
						break
					}
				}
				img := p.k.kill()
				if intn(2) == 0 {
					img = img.PowerLoss(newRand(rapid.Uint64().Draw(rt, "seed")))
				}
				p.s.Close()
				p.start(img)
			},
			"power loss": func(*rapid.T) {
				img := p.k.mem.PowerLoss(newRand(rapid.Uint64().Draw(rt, "seed")))
				p.s.Close()
				p.start(img)
			},
			"": func(*rapid.T) { checkAgainst(rt, p.s, p.h.model) },
		})
	})
}

// proc is the process running the store in the property test.
type proc struct {
	t    tb
	opts Options
	h    *history
	k    *killDisk
	s    *Store
}

// start opens the store on mem and settles the history.
func (p *proc) start(mem *vfs.MemFS) {
	p.t.Helper()
	p.k = newKillDisk(mem, -1)
	s, err := Open(p.k.fs, dir, p.opts)
	if err != nil {
		p.t.Fatalf("Open: %v", err)
	}
	p.s = s
	p.h.resolve(p.t, s, "reopen")
}

// write runs one generated op; it reports false once the process is dead.
func (p *proc) write(g gen) bool {
	p.t.Helper()
	o := g.next(p.h.model)
	serr := o.run(p.s)
	if serr != nil && p.k.killed() {
		p.h.inflight = &o
		return false
	}
	if merr := p.h.model.apply(o); !sameRefusal(serr, merr) {
		p.t.Fatalf("%v: store says %v, model says %v", o, serr, merr)
	}
	if serr == nil {
		p.h.accepted = append(p.h.accepted, o)
	}
	return true
}
