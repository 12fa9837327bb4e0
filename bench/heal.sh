#!/usr/bin/env bash
# bench/heal.sh: healing throughput and its effect on produce latency, on a
# loopback cluster. Three nodes hold each segment of a topic of factor 3 and
# a fourth is where a heal can copy to (with three nodes and one lost, no
# segment could get its third copy back). For each --heal-rate: start the
# four nodes, produce DATA_MB MiB into the topic through node 1, measure a
# one-record-at-a-time produce (`malachi bench produce --sync`, through
# node 1, another topic) with nothing healing, then kill -9 for good the
# node other than node 1 that holds the most sealed bytes and, once the
# heal starts (past --dead-after), run the same sync produce again while
# timing the heal until no node is filling a copy and `cluster status`
# lists no under-replicated sealed segment. One markdown table at the end.
#
# Usage: bench/heal.sh                          (rates 8MiB 32MiB 128MiB, 64 MiB)
#        RATES=32MiB DATA_MB=16 bench/heal.sh   (a short check)
#
# Environment (defaults in brackets):
#   RATES [8MiB 32MiB 128MiB]  --heal-rate of each run (32MiB is the default)
#   DATA_MB [64]            MiB produced into the topic before the node is lost
#   SIZE [1024]             record size of the bulk produce
#   SYNC_RECORDS [1500]     records of each sync produce (latency)
#   DEAD_AFTER [3s]         --dead-after of every node
#   SEGMENT_BYTES [4194304] --segment-max-bytes: the heal copies sealed segments
#   PORT [14740]            node i: PORT+10(i-1) client, +1 HTTP, +2 peer, +3 gossip
#   KEEP [0]                1 keeps the work folder (data, logs, outputs)
#   CMD_TIMEOUT [300]       seconds before one command is abandoned
#
# Heal MiB/s is the bytes of the copies recorded (every sealed segment the
# lost node held) over the time from the heal being allowed (the node
# declared dead in gossip, plus --dead-after) to the last copy recorded, from
# the nodes' logs (event=heal.copy_recorded); it includes up to one
# --heal-interval (1s here) before the first pass. The per-node columns
# split the same bytes by the node that received each copy (the one that
# logs it) and by its source, over the same time. "kill to healed" adds
# failure detection and --dead-after, and ends when `cluster status` lists
# no under-replicated sealed segment. Every process the script starts is
# stopped by PID on exit.
set -euo pipefail

RATES=${RATES:-8MiB 32MiB 128MiB}
DATA_MB=${DATA_MB:-64}
SIZE=${SIZE:-1024}
SYNC_RECORDS=${SYNC_RECORDS:-1500}
DEAD_AFTER=${DEAD_AFTER:-3s}
SEGMENT_BYTES=${SEGMENT_BYTES:-4194304}
PORT=${PORT:-14740}
KEEP=${KEEP:-0}
CMD_TIMEOUT=${CMD_TIMEOUT:-300}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/malachi-heal.XXXXXX")
PIDS=()
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
trap cleanup EXIT

log "building malachi"
(cd "$ROOT" && go build -o "$WORK/malachi" ./cmd/malachi)
M="$WORK/malachi"

node_port() { echo $((PORT + 10 * ($1 - 1))); }
NODE_PIDS=()

# start_cluster RATE RUN: four nodes, node 1 bootstraps, the others join it.
start_cluster() {
	local rate=$1 run=$2 i p join=()
	NODE_PIDS=()
	for i in 1 2 3 4; do
		p=$(node_port "$i")
		port_free "$p" || die "port $p is in use; set PORT"
		"$M" serve --dev --node-id "$i" --data-dir "$WORK/$run/n$i" \
			--listen "127.0.0.1:$p" --http "127.0.0.1:$((p + 1))" \
			--peer-listen "127.0.0.1:$((p + 2))" --gossip-listen "127.0.0.1:$((p + 3))" \
			"${join[@]}" --dead-after "$DEAD_AFTER" --heal-interval 1s --heal-rate "$rate" \
			--segment-max-bytes "$SEGMENT_BYTES" --log-level info \
			>"$WORK/$run/n$i.log" 2>&1 &
		NODE_PIDS+=($!)
		PIDS+=($!)
		join=(--join "127.0.0.1:$(($(node_port 1) + 3))")
		# One at a time: --dev nodes joining together race to seed the users.
		for _ in $(seq 600); do
			curl -fs "http://127.0.0.1:$((p + 1))/ready" >/dev/null 2>&1 && break
			sleep 0.1
		done
		curl -fs "http://127.0.0.1:$((p + 1))/ready" >/dev/null || die "node $i not ready (see $WORK/$run/n$i.log)"
	done
}

stop_cluster() {
	local pid
	for pid in "${NODE_PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		forget "$pid"
	done
}

# under_replicated: sealed segments `cluster status` on node 1 lists with
# fewer live copies than their factor ("?" while it cannot tell). Active
# segments are left out: the bulk topic's last one heals only when it
# rolls, which a topic nobody writes to does not.
under_replicated() {
	# It exits non-zero while the cluster is not healthy: the JSON is read anyway.
	{ "$M" --server "127.0.0.1:$(node_port 1)" --timeout 5s cluster status -o json 2>/dev/null || true; } |
		python3 -c '
import json, sys
try:
    st = json.load(sys.stdin)
except Exception:
    print("?"); sys.exit()
total = sum(int(t["segments"]) for t in st.get("under_replicated") or [])
listed = st.get("under_replicated_segments") or []
if total > len(listed):
    print(total)  # not all listed: cannot tell sealed from active
else:
    print(sum(1 for s in listed if not s.get("active")))'
}

now() { date +%s.%N; }

ROWS=()
run=0
for rate in $RATES; do
	run=$((run + 1))
	mkdir -p "$WORK/$run"
	log "run $run: --heal-rate $rate: starting four nodes"
	start_cluster "$rate" "$run"
	S1="127.0.0.1:$(node_port 1)"
	run_cmd "$WORK/$run/create.out" "$M" --server "$S1" topic create heal --replicas 3
	run_cmd "$WORK/$run/probe.out" "$M" --server "$S1" topic create probe --replicas 3
	records=$((DATA_MB * 1048576 / SIZE))
	log "producing $DATA_MB MiB ($records records of $SIZE bytes)"
	run_cmd "$WORK/$run/bulk.json" "$M" --server "$S1" bench produce --topic heal \
		--records "$records" --size "$SIZE" --json
	log "sync produce with nothing healing"
	run_cmd "$WORK/$run/quiet.json" "$M" --server "$S1" bench produce --topic probe \
		--sync --records "$SYNC_RECORDS" --size 128 --json
	# The node to lose: the one, besides node 1 (every segment's primary
	# here), that holds the most sealed bytes; they are what the heal copies.
	"$M" --server "$S1" topic describe heal -o json >"$WORK/$run/describe.json"
	read -r victim held segs < <(python3 - "$WORK/$run/describe.json" <<'EOF'
import json, sys
held, segs = {}, {}
for r in json.load(open(sys.argv[1]))["ranges"]:
    for s in r["segments"]:
        if not s["active"]:
            for n in s["replicas"]:
                held[n] = held.get(n, 0) + s["bytes"]
                segs[n] = segs.get(n, 0) + 1
held.pop("node-1", None)
n = max(held, key=held.get)
print(n.removeprefix("node-"), held[n], segs[n])
EOF
)
	log "kill -9 node $victim (it holds $held bytes in $segs sealed segments)"
	kill -9 "${NODE_PIDS[$((victim - 1))]}"
	killed=$(now)
	logs=()
	for i in 1 2 3 4; do [[ $i == "$victim" ]] || logs+=("$WORK/$run/n$i.log"); done
	# The latency run starts once the node is declared dead, with the heal.
	for _ in $(seq $((CMD_TIMEOUT * 10))); do
		grep -q "member_departed kind=dead member=$victim " "${logs[@]}" && break
		sleep 0.1
	done
	sleep "$DEAD_AFTER"
	"$M" --server "$S1" bench produce --topic probe --sync --records "$SYNC_RECORDS" \
		--size 128 --json >"$WORK/$run/healing.json" 2>"$WORK/$run/healing.err" &
	sync_pid=$!
	PIDS+=("$sync_pid")
	healed=""
	for _ in $(seq $((CMD_TIMEOUT * 10))); do
		if (($(cat "${logs[@]}" | grep -c "event=heal.copy_recorded") >= segs)) && [[ $(under_replicated) == 0 ]]; then
			healed=$(now)
			break
		fi
		sleep 0.1
	done
	[[ -n $healed ]] || die "run $run: still under-replicated after ${CMD_TIMEOUT}s (KEEP=1 keeps $WORK)"
	wait "$sync_pid" || die "run $run: the sync produce during the heal failed: $(tail -3 "$WORK/$run/healing.err")"
	forget "$sync_pid"
	row=$(python3 - "$victim" "$killed" "$healed" "${DEAD_AFTER%s}" "$WORK/$run/quiet.json" "$WORK/$run/healing.json" "$rate" "${logs[@]}" <<'EOF'
import datetime, json, re, sys
victim, killed, healed, dead_after = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
quiet, healing = json.load(open(sys.argv[5])), json.load(open(sys.argv[6]))
def ts(line):
    t = re.match(r"time=(\S+)", line).group(1)
    return datetime.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
dead, copies = None, []
into, out = {}, {}  # bytes each node received (it logs the copy) and sent
for path in sys.argv[8:]:
    node = re.search(r"n(\d+)\.log$", path).group(1)
    for line in open(path, errors="replace"):
        if "member_departed kind=dead member=%s " % victim in line:
            dead = ts(line) if dead is None else min(dead, ts(line))
        elif "event=heal.copy_recorded" in line:
            n = int(re.search(r" bytes=(\d+)", line).group(1))
            copies.append((ts(line), n))
            into[node] = into.get(node, 0) + n
            src = re.search(r" source=(\d+)", line).group(1)
            out[src] = out.get(src, 0) + n
allowed = dead + dead_after
last = max(t for t, _ in copies)
mib = sum(b for _, b in copies) / 1048576
heal = last - allowed
def p(r, k):
    return r["latency"][k + "_us"] / 1000.0
def per_node(d):
    return ", ".join("n%s %.1f" % (k, d[k] / 1048576 / heal) for k in sorted(d))
print("| %s | %.1f | %d | %.1f | %.2f | %.1f | %s | %s | %.2f | %.2f | %.2f | %.2f |" % (
    sys.argv[7], mib, len(copies), healed - killed, heal, mib / heal, per_node(into), per_node(out),
    p(quiet, "p50"), p(quiet, "p99"), p(healing, "p50"), p(healing, "p99")))
EOF
)
	ROWS+=("$row")
	log "$row"
	stop_cluster
done

echo
echo "| --heal-rate | MiB copied | copies | kill to healed (s) | heal (s) | heal MiB/s | MiB/s into each node | MiB/s out of each node | sync p50 quiet (ms) | sync p99 quiet (ms) | sync p50 healing (ms) | sync p99 healing (ms) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
