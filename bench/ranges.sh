#!/usr/bin/env bash
# bench/ranges.sh: produce and consume as a topic's ranges grow, with the
# node journal (the default) and without it (serve --no-journal), in one
# run on this machine. Prints one markdown table.
#
# Usage: bench/ranges.sh          (about 3-6 minutes on 2 cores; REPEAT
#                                 multiplies it)
#
# Besides records/s, and each as a share of one range's in the same run
# (when RANGES starts with 1), the table gives the CPU time the node and the bench
# client spent per record, produce and consume, in µs: on a machine
# shared with other work it moves far less than throughput does.
#
# For each R in RANGES and each mode: a fresh `malachi serve --dev` (built
# from this checkout) on a fresh data folder, then
#   malachi bench produce --ranges R --keys KEYS --records RECORDS --size 128
#   malachi bench consume --ranges R --keys KEYS --records RECORDS (fetch)
# on the same topic, and at R=1 also a one-record-at-a-time produce
# (--sync, SYNC_RECORDS records; p50 and p99 of the ack latency).
#
# Each row's node keeps its own data folder, and all are removed at the
# end. On ext4 without a journal, a file create skips and checks one by one
# every inode of its group deleted in the last minutes (find_inode_bit,
# recently_deleted): removing the 256-range row's folder before the 1,024
# row cost that row's 1,024 segment creates 200-450 µs of CPU each, about
# a fifth of its produce rate (docs/perf.md). Removals by an earlier run,
# or by anything else, are charged the same way: on such a filesystem,
# leave a few minutes between runs.
#
# Environment (defaults in brackets):
#   RANGES ["1 64 256 1024"]  RECORDS [1000000]  KEYS [100000]
#   SYNC_RECORDS [5000]       PORT [14150] (PORT+1: HTTP)
#   KEEP [0] keeps the work folder; CMD_TIMEOUT [300] seconds per command
#   MODES ["journal no-journal"] the storage modes to run
#   MALACHI [built from this checkout] a malachi binary to run instead
#   CONSUMES [1] consumes per row, one after another on the same data: the
#     table gives the first; the log line gives each one's rate and CPU
#     (the first read after a produce costs the node more: docs/perf.md)
#   REPEAT [1] passes over all rows, every other one in reverse order; the
#     table gives each figure's median over the passes, and the lowest and
#     highest share of one range, each pass's row against the same pass's
#     one-range row. On a shared machine one pass's shares move by ten
#     points or more from run to run (docs/perf.md, "sixth round"). Every
#     row keeps its data folder until the end: about 170 bytes per record
#     (340 MB a row at RECORDS=2000000), times rows, times passes.
set -euo pipefail

RANGES=${RANGES:-1 64 256 1024}
RECORDS=${RECORDS:-1000000}
KEYS=${KEYS:-100000}
SYNC_RECORDS=${SYNC_RECORDS:-5000}
PORT=${PORT:-14150}
KEEP=${KEEP:-0}
CMD_TIMEOUT=${CMD_TIMEOUT:-300}
MODES=${MODES:-journal no-journal}
CONSUMES=${CONSUMES:-1}
[[ $CONSUMES =~ ^[1-9][0-9]*$ ]] || { echo "CONSUMES must be a whole number of 1 or more, not '$CONSUMES'" >&2; exit 2; }
REPEAT=${REPEAT:-1}
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || { echo "REPEAT must be a whole number of 1 or more, not '$REPEAT'" >&2; exit 2; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$REPO/bench/lib.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/malachi-ranges.XXXXXX")
PIDS=()
NODE_PID=
trap cleanup EXIT
trap 'exit 130' INT TERM

isolate_env

jstat() { grep -m1 -E "\"$2\": " "$1" | sed -E 's/.*: ([0-9.eE+-]+),?$/\1/'; }

stop_node() {
	kill "$NODE_PID" 2>/dev/null || true
	wait "$NODE_PID" 2>/dev/null || true
	forget "$NODE_PID"
}

[[ -x /usr/bin/time ]] || die "/usr/bin/time is needed (Debian package: time)"
TICK=$(getconf CLK_TCK)
# node_cpu: the node's user + system CPU seconds so far.
node_cpu() { awk -v t="$TICK" '{printf "%.3f", ($14 + $15) / t}' "/proc/$NODE_PID/stat"; }

# run LABEL ARGS...: one `malachi bench ARGS --json`; prints records/s,
# and leaves in $WORK/cpu.LABEL the CPU µs per record of node and client.
run() {
	local label=$1 out=$WORK/out.$1 before
	shift
	before=$(node_cpu)
	run_cmd "$out" /usr/bin/time -f "%U %S" -o "$out.time" "$WORK/malachi" --server "127.0.0.1:$PORT" bench "$@" --json
	awk -v b="$before" -v a="$(node_cpu)" -v n="$RECORDS" '{printf "%.2f + %.2f", (a - b) * 1e6 / n, ($1 + $2) * 1e6 / n}' \
		"$out.time" >"$WORK/cpu.$label"
	jstat "$out" records_per_s
}

if [[ -n ${MALACHI:-} ]]; then
	cp "$MALACHI" "$WORK/malachi"
else
	log "building malachi"
	(cd "$REPO" && go build -o "$WORK/malachi" ./cmd/malachi)
fi

# Each row's results, by "pass mode r": records/s, CPU µs per record, and
# at one range the sync produce latencies.
declare -A P=() C=() PC=() CC=() SYNC=()
# pct RATE BASE: RATE as a whole percentage of BASE.
pct() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.0f", 100 * a / b}'; }
# median N...: the median of the numbers given (the lower middle one of an
# even count).
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# extremes N...: "lowest-highest" of the numbers given.
extremes() { printf '%s\n' "$@" | sort -g | sed -n '1p;$p' | paste -sd- | sed 's/^\([^-]*\)$/\1-\1/'; }
# row PASS R MODE: one row on a fresh node.
row() {
	local pass=$1 r=$2 mode=$3 key="$1 $3 $2" data p c i ci again flags=()
	# A data folder per row, all removed at the end: removing one between
	# rows would charge its deletes to the next row's file creates on a
	# filesystem without a journal (see the header).
	data=$WORK/data.$pass.$r.$mode
	[[ $mode == no-journal ]] && flags+=(--no-journal)
	start_node "$data" "${flags[@]}"
	local topic=r$r
	p=$(run "p.$r.$mode" produce --topic "$topic" --ranges "$r" --keys "$KEYS" --records "$RECORDS" --size 128)
	c=$(run "c.$r.$mode" consume --topic "$topic" --ranges "$r" --keys "$KEYS" --records "$RECORDS")
	again=
	for ((i = 2; i <= CONSUMES; i++)); do
		ci=$(run "c$i.$r.$mode" consume --topic "$topic" --ranges "$r" --keys "$KEYS" --records "$RECORDS")
		again+=", consume $i: $ci rec/s, CPU us/rec $(cat "$WORK/cpu.c$i.$r.$mode")"
	done
	SYNC[$key]=-
	if [[ $r == 1 ]]; then
		run "s.$r.$mode" produce --topic s1 --sync --records "$SYNC_RECORDS" --size 128 >/dev/null
		SYNC[$key]="$(jstat "$WORK/out.s.$r.$mode" p50_us) / $(jstat "$WORK/out.s.$r.$mode" p99_us)"
	fi
	stop_node
	# The row's writes reach the disk before the next row starts, so
	# that the kernel's writeback of one row is not charged to the next.
	sync
	P[$key]=$p C[$key]=$c PC[$key]=$(cat "$WORK/cpu.p.$r.$mode") CC[$key]=$(cat "$WORK/cpu.c.$r.$mode")
	log "pass $pass, ranges $r, $mode: produce $p rec/s, consume $c rec/s, sync p50/p99 ${SYNC[$key]} us, CPU us/rec (node + client) produce ${PC[$key]}, consume ${CC[$key]}$again"
}

# Every other pass takes the rows in reverse order: whatever a row's place
# in a pass costs or gains (the first node of the run, the memory earlier
# rows left) falls on each row alike.
for ((pass = 1; pass <= REPEAT; pass++)); do
	order=$RANGES
	if ((pass % 2 == 0)); then
		order=$(printf '%s\n' $RANGES | tac | xargs)
	fi
	for r in $order; do
		for mode in $MODES; do
			row "$pass" "$r" "$mode"
		done
	done
done

# summary R MODE: the row's table line. Each share of one range is the
# row's rate over one range's in the same pass; with several passes the
# rates, shares and CPU figures are each pass's median, and the shares'
# range follows in brackets.
summary() {
	local r=$1 mode=$2 pass key base ps=() cs=() pp=() cp=() syncs=() pcs=() ccs=() share=- spread=
	for ((pass = 1; pass <= REPEAT; pass++)); do
		key="$pass $mode $r"
		base="$pass $mode 1"
		ps+=("${P[$key]}") cs+=("${C[$key]}")
		pcs+=("${PC[$key]}") ccs+=("${CC[$key]}")
		[[ $r == 1 ]] && syncs+=("${SYNC[$key]}")
		if [[ -n ${P[$base]:-} ]]; then
			pp+=("$(pct "${P[$key]}" "${P[$base]}")") cp+=("$(pct "${C[$key]}" "${C[$base]}")")
		fi
	done
	if ((${#pp[@]} > 0)); then
		share="$(median "${pp[@]}")% / $(median "${cp[@]}")%"
		if ((REPEAT > 1)) && [[ $r != 1 ]]; then
			spread=" ($(extremes "${pp[@]}")% / $(extremes "${cp[@]}")%)"
		fi
	fi
	local sync=-
	if ((${#syncs[@]} > 0)); then
		sync="$(median "${syncs[@]%% *}") / $(median "${syncs[@]##* }")"
	fi
	# The CPU figures "node + client": the median of each side.
	local pcpu ccpu
	pcpu="$(median "${pcs[@]%% *}") + $(median "${pcs[@]##* }")"
	ccpu="$(median "${ccs[@]%% *}") + $(median "${ccs[@]##* }")"
	printf '| %s | %s | %s | %s | %s%s | %s | %s | %s |\n' "$r" "$mode" \
		"$(printf "%'.0f" "$(median "${ps[@]}")")" "$(printf "%'.0f" "$(median "${cs[@]}")")" \
		"$share" "$spread" "$sync" "$pcpu" "$ccpu"
}

echo
if ((REPEAT > 1)); then
	echo "Medians of $REPEAT passes; in brackets, the lowest and highest share of one range in a pass."
	echo
fi
echo "| ranges | storage | produce rec/s | consume rec/s | produce / consume, of 1 range | sync produce p50 / p99 µs | produce CPU µs/rec, node + client | consume CPU µs/rec, node + client |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|"
for r in $RANGES; do
	for mode in $MODES; do
		summary "$r" "$mode"
	done
done
