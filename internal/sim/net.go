package sim

import "github.com/malachi-log/malachi/internal/replication"

// clientBase is the first client address; nodes are 1..Nodes and the
// control plane is 0 in the partition table.
const clientBase = 1000

// packet is one message on the simulated network. Exactly one of its
// bodies is set. Replication messages travel encoded, so every run also
// exercises their codecs.
type packet struct {
	repl     []byte
	req      *produceReq
	resp     *produceResp
	copyReq  *copyReq
	copyResp *copyResp
}

// network delivers packets after a seeded delay. Replication messages
// may be lost, duplicated and reordered (the protocol resends and the
// real transport may reconnect); requests and replies ride a connection:
// they are lost only with their node or a partition. A cut between two
// addresses loses everything sent either way while it lasts.
type network struct {
	w   *world
	cut map[[2]uint64]bool
}

func pair(a, b uint64) [2]uint64 {
	if a > b {
		a, b = b, a
	}
	return [2]uint64{a, b}
}

func (n *network) isCut(a, b uint64) bool { return n.cut[pair(a, b)] }

func (n *network) sendRepl(from, to uint64, m replication.Message) {
	if m == nil {
		return
	}
	w := n.w
	if w.chance(w.cfg.DropRate) {
		w.stats.DroppedMsgs++
		return
	}
	p := packet{repl: replication.Encode(m)}
	n.send(from, to, p)
	if w.chance(w.cfg.DupRate) {
		w.stats.DupMsgs++
		n.send(from, to, p)
	}
}

func (n *network) send(from, to uint64, p packet) {
	w := n.w
	if n.isCut(from, to) {
		w.stats.DroppedMsgs++
		return
	}
	delay := w.between(w.cfg.NetDelayMin, w.cfg.NetDelayMax)
	if w.chance(w.cfg.SlowRate) {
		delay *= 1 + w.rng.Int64N(20) // a slow link or a stalled sender
	}
	w.note('m', from, to, uint64(len(p.repl)), uint64(delay))
	w.after(delay, func() { n.deliver(from, to, p) })
}

func (n *network) deliver(from, to uint64, p packet) {
	w := n.w
	if n.isCut(from, to) {
		w.stats.DroppedMsgs++
		return
	}
	if to >= clientBase {
		if c := int(to - clientBase); c < len(w.clients) && p.resp != nil {
			w.clients[c].onReply(*p.resp)
		}
		return
	}
	nd := w.node(to)
	if nd == nil || !nd.up {
		return
	}
	w.note('d', from, to)
	switch {
	case p.repl != nil:
		nd.onRepl(from, p.repl)
	case p.req != nil:
		nd.onProduce(from, *p.req)
	case p.resp != nil:
		nd.onForwardReply(*p.resp)
	case p.copyReq != nil:
		nd.onCopyReq(from, *p.copyReq)
	case p.copyResp != nil:
		nd.onCopyResp(from, *p.copyResp)
	}
}

// faultGap is the time to the next fault: uniform around FaultEvery.
func (w *world) faultGap() int64 { return w.between(w.cfg.FaultEvery/2, w.cfg.FaultEvery*3/2) }

// fault injects one seeded fault and schedules the next while faults are on.
func (w *world) fault() {
	if !w.faultsOn {
		return
	}
	defer w.after(w.faultGap(), w.fault)
	if w.diskFault(w.rng.Float64()) {
		return
	}
	switch k := w.rng.IntN(10); {
	case k < 3:
		w.crashSome()
	case k < 5:
		w.restartSome()
	case k < 7:
		w.partitionSome()
	case k < 9:
		w.healSome()
	default:
		w.outage()
	}
}

func (w *world) down() []*node {
	var out []*node
	for _, n := range w.nodes {
		if !n.up {
			out = append(out, n)
		}
	}
	return out
}

func (w *world) crashSome() {
	if len(w.down()) >= w.cfg.MaxDown {
		return
	}
	n := w.nodes[w.rng.IntN(len(w.nodes))]
	if !n.up {
		return
	}
	n.crash(w.chance(0.5))
	// A node comes back on its own after a while, unless a restart
	// fault picks it first.
	inc := n.inc
	w.after(w.between(300, 1500), func() {
		if !n.up && n.inc == inc {
			n.restart()
		}
	})
}

func (w *world) restartSome() {
	var d []*node
	for _, n := range w.down() {
		if !n.lost {
			d = append(d, n)
		}
	}
	if len(d) > 0 {
		d[w.rng.IntN(len(d))].restart()
	}
}

// partitionSome cuts one node off from one other node, from every
// other node, or from the control plane.
func (w *world) partitionSome() {
	a := uint64(w.rng.IntN(len(w.nodes)) + 1)
	w.stats.Partitions++
	switch w.rng.IntN(3) {
	case 0:
		b := uint64(w.rng.IntN(len(w.nodes)) + 1)
		if a != b {
			w.net.cut[pair(a, b)] = true
			w.note('p', a, b)
		}
	case 1:
		for b := uint64(0); b <= uint64(len(w.nodes)); b++ {
			if b != a {
				w.net.cut[pair(a, b)] = true
			}
		}
		w.note('P', a)
	default:
		w.net.cut[pair(0, a)] = true
		w.note('p', 0, a)
	}
}

func (w *world) healSome() {
	if len(w.net.cut) == 0 {
		return
	}
	w.net.cut = map[[2]uint64]bool{}
	w.note('h')
	w.catchUpAll()
}

// outage makes the control plane unavailable for a while.
func (w *world) outage() {
	if !w.cfg.ControlPlaneOutages || !w.cp.up {
		return
	}
	w.cp.up = false
	w.stats.Outages++
	w.note('o')
	w.after(w.between(100, 600), func() {
		w.cp.up = true
		w.note('O')
		w.catchUpAll()
	})
}

// healAll ends the fault phase: partitions heal, the control plane comes
// back, disks have space again, every node but a lost one restarts.
func (w *world) healAll() {
	w.faultsOn = false
	w.net.cut = map[[2]uint64]bool{}
	w.cp.up = true
	for _, n := range w.nodes {
		n.disk.full, n.disk.failSync = false, false
		if !n.up && !n.lost {
			n.restart()
		}
	}
	w.catchUpAll()
}

// catchUpAll lets every node that reaches the control plane apply the
// seals it missed, as a node's metadata view catches up.
func (w *world) catchUpAll() {
	for _, n := range w.nodes {
		if n.up && w.cp.reachable(n.id) {
			n.catchUp()
		}
	}
}
