#!/usr/bin/env bash
# bench/cluster-idle.sh: what an idle cluster costs. Starts a local
# 3-node cluster (`malachi dev --nodes 3`, built from this checkout) with
# V vnodes, waits until every metadata group has its three voters, lets it
# settle, then reads each node's CPU time (utime + stime in
# /proc/PID/stat) and its peer traffic counters (`malachi cluster status
# -o json`, summed over its peers) at the start and the end of a window
# with no client traffic. Prints one markdown table: CPU per node as a
# percentage of one core, resident memory, the metadata groups the node
# leads, and the peer frames (messages) per second the node sent and
# received, with the bytes per second sent. With REBALANCE=1 the
# cluster's rebalance is applied first (`malachi cluster rebalance
# --apply`), which spreads the groups' leadership over the three nodes.
#
# Usage: bench/cluster-idle.sh          (about 1 minute per V on 2 cores)
#
# Environment (defaults in brackets):
#   VNODES ["64"]   vnode counts to measure, one cluster each
#   WINDOW [30]     seconds measured
#   SETTLE [10]     seconds waited after the cluster formed
#   PORT [14240]    node 1's client port; node N uses PORT+10(N-1)..+3
#   REBALANCE [0]   1: apply a rebalance and wait for it before measuring
#   KEEP [0] keeps the work folder; CMD_TIMEOUT [120] seconds for start-up
set -euo pipefail

VNODES=${VNODES:-64}
WINDOW=${WINDOW:-30}
SETTLE=${SETTLE:-10}
PORT=${PORT:-14240}
KEEP=${KEEP:-0}
REBALANCE=${REBALANCE:-0}
CMD_TIMEOUT=${CMD_TIMEOUT:-120}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$REPO/bench/lib.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/malachi-cluster-idle.XXXXXX")
PIDS=()
trap cleanup EXIT
trap 'exit 130' INT TERM

isolate_env
HZ=$(getconf CLK_TCK)

# cpu_ticks PID: user + system CPU time of PID so far, in clock ticks.
# The command name (field 2) may hold spaces, so fields are counted from
# the closing parenthesis.
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

# admin ADDR ARGS...: a malachi command as the dev administrator.
admin() {
	local addr=$1
	shift
	"$WORK/malachi" --server "$addr" --user admin --password admin123 "$@"
}

# peer_counters ADDR: "frames_sent frames_received bytes_sent leads" of
# the node at ADDR, the counters summed over its peers, and the groups it
# leads, from one cluster status.
peer_counters() {
	admin "$1" cluster status -o json | python3 -c 'import json,sys
s = json.load(sys.stdin)
p = s.get("peers") or []
leads = sum(1 for g in s["groups"] if g["leader"] == s["node"])
print(sum(x["frames_sent"] for x in p), sum(x["frames_received"] for x in p), sum(x["bytes_sent"] for x in p), leads)'
}

# rebalance ADDR: apply the rebalance and wait until a plan has no moves.
rebalance() {
	admin "$1" cluster rebalance --apply >/dev/null
	for ((i = 0; i < CMD_TIMEOUT * 10; i++)); do
		moves=$(admin "$1" cluster rebalance -o json | python3 -c 'import json,sys
p = json.load(sys.stdin)
print(sum(len(g.get("add") or []) + len(g.get("remove") or []) + (g["new_leader"] not in (0, g["leader"])) for g in p["groups"]))')
		[[ $moves == 0 ]] && return 0
		sleep 0.5
	done
	die "the rebalance was not carried out in ${CMD_TIMEOUT}s"
}

log "building malachi"
(cd "$REPO" && go build -o "$WORK/malachi" ./cmd/malachi)

echo "| vnodes | node | groups led | CPU, % of one core | RSS MiB | peer frames/s sent | peer frames/s received | peer KiB/s sent |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for v in $VNODES; do
	for ((n = 0; n < 3; n++)); do
		for ((k = 0; k < 4; k++)); do
			port_free $((PORT + 10 * n + k)) || die "port $((PORT + 10 * n + k)) is in use; set PORT"
		done
	done
	out=$WORK/dev-$v.out
	"$WORK/malachi" dev --nodes 3 --vnodes "$v" --data-dir "$WORK/dev-$v" --base-port "$PORT" \
		>"$out" 2>"$WORK/dev-$v.log" &
	DEV=$!
	PIDS+=("$DEV")
	# dev prints its last line once every group has its three voters.
	for ((i = 0; i < CMD_TIMEOUT * 10; i++)); do
		grep -q '^Ctrl-C stops every node' "$out" && break
		kill -0 "$DEV" 2>/dev/null || die "malachi dev exited:"$'\n'"$(tail -20 "$WORK/dev-$v.log")"
		sleep 0.1
	done
	grep -q '^Ctrl-C stops every node' "$out" || die "the cluster did not form in ${CMD_TIMEOUT}s"
	grep -q 'still forming' "$WORK/dev-$v.log" && die "the cluster did not form: $(tail -5 "$WORK/dev-$v.log")"
	mapfile -t NODE_PIDS < <(awk '$1 ~ /^node-/ && $2 == "client" {print $NF}' "$out")
	mapfile -t NODE_ADDRS < <(awk '$1 ~ /^node-/ && $2 == "client" {print $3}' "$out")
	if [[ $REBALANCE == 1 ]]; then
		log "vnodes=$v: formed; applying a rebalance"
		rebalance "${NODE_ADDRS[0]}"
	fi
	log "vnodes=$v: formed; settling ${SETTLE}s, then measuring ${WINDOW}s"
	sleep "$SETTLE"
	before=()
	peers_before=()
	for i in "${!NODE_PIDS[@]}"; do
		before+=("$(cpu_ticks "${NODE_PIDS[$i]}")")
		peers_before+=("$(peer_counters "${NODE_ADDRS[$i]}")")
	done
	sleep "$WINDOW"
	for i in "${!NODE_PIDS[@]}"; do
		p=${NODE_PIDS[$i]}
		ticks=$(($(cpu_ticks "$p") - before[i]))
		read -r fs0 fr0 bs0 _ <<<"${peers_before[$i]}"
		read -r fs1 fr1 bs1 leads <<<"$(peer_counters "${NODE_ADDRS[$i]}")"
		pct=$(awk -v t="$ticks" -v hz="$HZ" -v w="$WINDOW" 'BEGIN {printf "%.2f", 100 * t / hz / w}')
		rss=$(awk -v k="$(rss_kb "$p" VmRSS)" 'BEGIN {printf "%.0f", k / 1024}')
		rates=$(awk -v fs=$((fs1 - fs0)) -v fr=$((fr1 - fr0)) -v bs=$((bs1 - bs0)) -v w="$WINDOW" \
			'BEGIN {printf "%.1f | %.1f | %.1f", fs / w, fr / w, bs / 1024 / w}')
		echo "| $v | $((i + 1)) | $leads | $pct | $rss | $rates |"
	done
	kill -INT "$DEV"
	wait "$DEV" || true
	forget "$DEV"
done
