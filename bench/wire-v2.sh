#!/usr/bin/env bash
# bench/wire-v2.sh: wire v2 (batch-native produce and fetch) against wire v1
# on this machine, in one run, with NATS JetStream and the disk's own
# fsync'd write rate beside them. Prints one markdown table.
#
# Usage: bench/wire-v2.sh               (about 2.5 minutes on 2 cores, plus about
#                                        2 minutes to install NATS the first time)
#        NATS=0 bench/wire-v2.sh        (without the NATS rows)
#
# What it does:
#   1. builds malachi from this checkout (go build, into a temporary folder)
#      and starts `malachi serve --dev` on a fresh data folder in that
#      temporary folder, with the built-in defaults (no config file);
#   2. dd if=/dev/zero bs=1M and bs=128K oflag=dsync on the data folder's
#      filesystem (the disk's ceiling for fsync'd sequential writes; a 1 KiB
#      record batch is about 1 MiB), before the broker runs and after them;
#   3. `malachi bench produce` of 128 B, 1 KiB and 16 KiB records, closed
#      loop, one producer, with --wire v2 and --wire v1 (alternating which
#      goes first), each into a topic of its own;
#   4. `malachi bench consume` (fetch, one consumer) of each size's v2 topic
#      with --wire v2 and --wire v1;
#   5. `malachi bench produce --sync` of 128 B records, one record per
#      request, with each wire version (p50 and p99 of the ack latency);
#   6. the node's peak RSS during each run: VmHWM from /proc/PID/status,
#      reset through /proc/PID/clear_refs before the run (or, where the
#      reset is refused, the largest VmRSS sampled every 50 ms);
#   7. NATS JetStream through bench/peers/nats.sh (SYSTEMS=nats, one round,
#      the same sizes): async publish with the default sync_interval and
#      with sync_interval: always, ordered consume, one-at-a-time publish.
#
# Environment (defaults in brackets):
#   RECORDS_128 [5000000] RECORDS_1K [1500000] RECORDS_16K [70000]
#                           records of each size's produce and consume runs
#                           (about 5-15 s each on a 2-core machine)
#   SYNC_RECORDS [10000]    records of each one-at-a-time produce run
#   NATS [1]                0 skips NATS; NATS_RECORDS ["1000000 500000 100000"],
#                           NATS_FSYNC_RECORDS [20000], NATS_SYNC_RECORDS [5000]
#   DD_1M_COUNT [512] DD_128K_COUNT [2048]   dd write counts
#   PORT [14140]            the node's client port (PORT+1: its HTTP port)
#   COMPRESSION [none]      --compression of the v2 produce runs (the consumes
#                           then read compressed batches; bench values repeat
#                           one filler, so they compress unrealistically well)
#   KEEP [0]                1 keeps the work folder (data, logs, outputs)
#   CMD_TIMEOUT [300]       seconds before one command is abandoned
set -euo pipefail

RECORDS_128=${RECORDS_128:-5000000}
RECORDS_1K=${RECORDS_1K:-1500000}
RECORDS_16K=${RECORDS_16K:-70000}
SYNC_RECORDS=${SYNC_RECORDS:-10000}
NATS=${NATS:-1}
NATS_RECORDS=${NATS_RECORDS:-1000000 500000 100000}
NATS_FSYNC_RECORDS=${NATS_FSYNC_RECORDS:-20000}
NATS_SYNC_RECORDS=${NATS_SYNC_RECORDS:-5000}
DD_1M_COUNT=${DD_1M_COUNT:-512}
DD_128K_COUNT=${DD_128K_COUNT:-2048}
PORT=${PORT:-14140}
COMPRESSION=${COMPRESSION:-none}
KEEP=${KEEP:-0}
CMD_TIMEOUT=${CMD_TIMEOUT:-300}

SIZES=(128 1024 16384)
declare -A RECORDS=([128]=$RECORDS_128 [1024]=$RECORDS_1K [16384]=$RECORDS_16K)
declare -A SIZE_NAME=([128]="128 B" [1024]="1 KiB" [16384]="16 KiB")

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$REPO/bench/lib.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/malachi-wire-v2.XXXXXX")
DATA=$WORK/data
RESULTS=$WORK/results.tsv # label wire records_per_s mb_per_s p50_us p99_us rss_kb
PIDS=()
NODE_PID=

trap cleanup EXIT
trap 'exit 130' INT TERM

isolate_env

# ---- peak RSS ----------------------------------------------------------

SAMPLER=
start_rss() {
	RSS_RESET=0
	if echo 5 >"/proc/$NODE_PID/clear_refs" 2>/dev/null; then
		RSS_RESET=1
		return
	fi
	: >"$WORK/rss.samples"
	(while kill -0 "$NODE_PID" 2>/dev/null; do rss_kb "$NODE_PID" VmRSS >>"$WORK/rss.samples"; sleep 0.05; done) &
	SAMPLER=$!
	PIDS+=("$SAMPLER")
}

stop_rss() { # sets RSS, the peak in kB
	if [[ $RSS_RESET == 1 ]]; then
		RSS=$(rss_kb "$NODE_PID" VmHWM)
		return
	fi
	kill "$SAMPLER" 2>/dev/null || true
	wait "$SAMPLER" 2>/dev/null || true
	forget "$SAMPLER"
	RSS=$(sort -n "$WORK/rss.samples" | tail -1)
}

# ---- runs --------------------------------------------------------------

# run_cmd OUT CMD...: one command, its output to OUT, in the background
# so that Ctrl-C reaches the script at once.

# jstat FILE KEY: the first "KEY": value of a --json result (the run's own
# stats come before any nested ones, and no config key shares these names).
jstat() { grep -m1 -E "\"$2\": " "$1" | sed -E 's/.*: ([0-9.eE+-]+),?$/\1/'; }

# bench LABEL WIRE ARGS...: one `malachi --wire WIRE bench ARGS --json`.
bench() {
	local label=$1 wire=$2 out
	shift 2
	out=$WORK/out.$label.$wire
	start_rss
	run_cmd "$out" "$WORK/malachi" --wire "$wire" --server "127.0.0.1:$PORT" bench "$@" --json
	stop_rss
	[[ $(jstat "$out" wire) == "${wire#v}" ]] || die "$label: asked for wire $wire, the report says $(jstat "$out" wire)"
	local p50=- p99=-
	if grep -q '"p50_us"' "$out"; then
		p50=$(jstat "$out" p50_us)
		p99=$(jstat "$out" p99_us)
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$wire" "$(jstat "$out" records_per_s)" "$(jstat "$out" mb_per_s)" \
		"$p50" "$p99" "$RSS" >>"$RESULTS"
	log "  $label $wire: $(commas "$(jstat "$out" records_per_s)") rec/s, $(mbs "$(jstat "$out" mb_per_s)") MB/s" \
		"in $(awk -v s="$(jstat "$out" elapsed_s)" 'BEGIN {printf "%.1f", s}') s, p50 $p50 us, node peak RSS $((RSS / 1024)) MiB"
}

# both FIRST LABEL ARGS...: bench LABEL with both wire versions, FIRST
# first. @WIRE@ in ARGS becomes the version (v1, v2); the v2 runs of
# async produces get --compression too.
both() {
	local first=$1 label=$2 w
	shift 2
	local order=(v2 v1)
	[[ $first == v2 ]] || order=(v1 v2)
	for w in "${order[@]}"; do
		local args=("${@//@WIRE@/$w}")
		if [[ $w == v2 && $label == produce-* && $COMPRESSION != none ]]; then
			args+=(--compression "$COMPRESSION")
		fi
		bench "$label" "$w" "${args[@]}"
	done
}

# dd_mbs BS COUNT: MB/s (10^6 bytes) of fsync'd sequential writes of BS
# on the data folder's filesystem.
dd_mbs() {
	local out
	out=$(dd if=/dev/zero of="$WORK/dd.bin" bs="$1" count="$2" oflag=dsync 2>&1 | tail -1)
	rm -f "$WORK/dd.bin"
	sync
	awk '{for (i = 1; i <= NF; i++) if ($i == "s,") s = $(i-1); printf "%.0f\n", $1 / s / 1e6}' <<<"$out"
}

run_dd() { # PHASE: start or end
	DD[1M_$1]=$(dd_mbs 1M "$DD_1M_COUNT")
	DD[128K_$1]=$(dd_mbs 128K "$DD_128K_COUNT")
	log "  dd oflag=dsync ($1): 1 MiB writes ${DD[1M_$1]} MB/s, 128 KiB writes ${DD[128K_$1]} MB/s"
}

run_nats() {
	[[ $NATS == 1 ]] || return 0
	log "NATS JetStream (bench/peers/nats.sh, log in $WORK/nats*.log)"
	local env=(SYSTEMS=nats ROUNDS=1 CMD_TIMEOUT="$CMD_TIMEOUT" MALACHI_BENCH_CACHE="${MALACHI_BENCH_CACHE:-$HOME/.cache/malachi-bench}")
	env "${env[@]}" SIZES="${SIZES[*]}" RECORDS="$NATS_RECORDS" FSYNC_RECORDS="$NATS_FSYNC_RECORDS" \
		WORKLOADS="async consume-ordered async-fsync" RESULTS_OUT="$WORK/nats.tsv" \
		"$REPO/bench/peers/nats.sh" >"$WORK/nats.log" 2>&1 || { tail -20 "$WORK/nats.log" >&2; die "nats.sh failed"; }
	env "${env[@]}" SIZES=128 RECORDS="$NATS_SYNC_RECORDS" SYNC_RECORDS="$NATS_SYNC_RECORDS" \
		WORKLOADS="sync sync-fsync" RESULTS_OUT="$WORK/nats-sync.tsv" \
		"$REPO/bench/peers/nats.sh" >"$WORK/nats-sync.log" 2>&1 || { tail -20 "$WORK/nats-sync.log" >&2; die "nats.sh failed"; }
	cat "$WORK/nats-sync.tsv" >>"$WORK/nats.tsv"
}

# ---- report --------------------------------------------------------------

# get LABEL WIRE COLUMN: 3 rec/s, 4 MB/s, 5 p50, 6 p99, 7 rss_kb.
get() { awk -F'\t' -v l="$1" -v w="$2" -v c="$3" '$1==l && $2==w {print $c; exit}' "$RESULTS"; }
# nats_get WORKLOAD SIZE COLUMN (from nats.sh's TSV): 5 value, 6 rss_kb; METRIC rate unless given.
nats_get() {
	[[ -s $WORK/nats.tsv ]] || return 0
	awk -F'\t' -v w="$1" -v z="$2" -v c="$3" -v m="${4:-rate}" '$1==w && $2=="nats" && $3==m && $7==z {print $c; exit}' "$WORK/nats.tsv"
}
# commas N: N rounded, with thousands separators.
commas() { awk -v n="$1" 'BEGIN {s = sprintf("%.0f", n); o = ""; while (length(s) > 3) {o = "," substr(s, length(s)-2) o; s = substr(s, 1, length(s)-3)}; print s o}'; }
# mbs X: X MB/s as people read it: whole above 10, else one decimal.
mbs() { awk -v m="$1" 'BEGIN {if (m >= 10) printf "%.0f", m; else printf "%.1f", m}'; }
mib() { [[ -n $1 ]] && awk -v k="$1" 'BEGIN {printf "%.0f", k/1024}' || echo "-"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a+0 > 0 && b+0 > 0) printf "%.2f", a/b; else print "-"}'; }
rate_cell() { # REC_S MB_S
	[[ -n $1 ]] || { echo "-"; return; }
	echo "$(commas "$1") rec/s, $(mbs "$2") MB/s"
}
nats_cell() { # WORKLOAD SIZE
	local r
	r=$(nats_get "$1" "$2" 5)
	[[ -n $r ]] || { echo "-"; return; }
	rate_cell "$r" "$(awk -v r="$r" -v z="$2" 'BEGIN {print r*z/1e6}')"
}

report() {
	local z l
	echo
	echo "Wire v2 vs wire v1, $(date -u +'%Y-%m-%d %H:%M') UTC: malachi $(cd "$REPO" && git describe --always --dirty 2>/dev/null || echo "?"), $(go version | awk '{print $3}')"
	echo "$(nproc) CPUs, Linux $(uname -r), data folder on $(df -T "$WORK" | awk 'NR==2 {print $2 " (" $1 ")"}'); node: malachi serve --dev (built-in defaults), loopback;"
	echo "one client connection per run, closed loop, records without keys. v2 produce compression: $COMPRESSION."
	echo "Load average (1 min) before the runs $LOAD_START, after $(cut -d' ' -f1 /proc/loadavg): other work on the machine skews every number."
	echo "Ratio v2 / v1: throughput, higher is better; latency, lower is better. RSS: the node's (or NATS's) peak during the run."
	echo "NATS JetStream $(grep -m1 -o 'NATS_SERVER_VERSION=[^ ]*' "$REPO/bench/peers/nats.sh" | cut -d= -f2) (bench/peers/nats.sh): async publish / ordered consume with the default"
	echo "sync_interval (no fsync before the ack); \"NATS fsync\" is sync_interval: always, which matches Malachi's fsync before every ack."
	echo
	echo "| run | wire v2 | wire v1 | v2 / v1 | NATS | NATS fsync | RSS v2 / v1 / NATS, MiB |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	for z in "${SIZES[@]}"; do
		l=produce-$z
		echo "| produce ${SIZE_NAME[$z]} x $(commas "${RECORDS[$z]}") | $(rate_cell "$(get "$l" v2 3)" "$(get "$l" v2 4)") |" \
			"$(rate_cell "$(get "$l" v1 3)" "$(get "$l" v1 4)") | $(ratio "$(get "$l" v2 3)" "$(get "$l" v1 3)") |" \
			"$(nats_cell async "$z") | $(nats_cell async-fsync "$z") |" \
			"$(mib "$(get "$l" v2 7)") / $(mib "$(get "$l" v1 7)") / $(mib "$(nats_get async "$z" 6)") |"
	done
	for z in "${SIZES[@]}"; do
		l=consume-$z
		echo "| consume ${SIZE_NAME[$z]} x $(commas "${RECORDS[$z]}") (fetch; NATS: ordered) | $(rate_cell "$(get "$l" v2 3)" "$(get "$l" v2 4)") |" \
			"$(rate_cell "$(get "$l" v1 3)" "$(get "$l" v1 4)") | $(ratio "$(get "$l" v2 3)" "$(get "$l" v1 3)") |" \
			"$(nats_cell consume-ordered "$z") | - |" \
			"$(mib "$(get "$l" v2 7)") / $(mib "$(get "$l" v1 7)") / $(mib "$(nats_get consume-ordered "$z" 6)") |"
	done
	l=sync-128
	local n50 n99 f50 f99
	n50=$(nats_get sync 128 5 p50_us) n99=$(nats_get sync 128 5 p99_us)
	f50=$(nats_get sync-fsync 128 5 p50_us) f99=$(nats_get sync-fsync 128 5 p99_us)
	echo "| sync produce 128 B x $(commas "$SYNC_RECORDS"), one record per request: p50 / p99 µs |" \
		"$(commas "$(get "$l" v2 5)") / $(commas "$(get "$l" v2 6)") | $(commas "$(get "$l" v1 5)") / $(commas "$(get "$l" v1 6)") |" \
		"$(ratio "$(get "$l" v2 5)" "$(get "$l" v1 5)") |" \
		"$([[ -n $n50 ]] && echo "$(commas "$n50") / $(commas "$n99")" || echo -) |" \
		"$([[ -n $f50 ]] && echo "$(commas "$f50") / $(commas "$f99")" || echo -) |" \
		"$(mib "$(get "$l" v2 7)") / $(mib "$(get "$l" v1 7)") / $(mib "$(nats_get sync 128 6 p50_us)") |"
	echo "| sync produce 128 B, rec/s | $(commas "$(get "$l" v2 3)") | $(commas "$(get "$l" v1 3)") | $(ratio "$(get "$l" v2 3)" "$(get "$l" v1 3)") |" \
		"$([[ -n $n50 ]] && commas "$(nats_get sync 128 5)" || echo -) | $([[ -n $f50 ]] && commas "$(nats_get sync-fsync 128 5)" || echo -) | |"
	echo "| disk: dd bs=1M oflag=dsync, before / after the runs | ${DD[1M_start]} / ${DD[1M_end]} MB/s | | | | | |"
	echo "| disk: dd bs=128K oflag=dsync, before / after the runs | ${DD[128K_start]} / ${DD[128K_end]} MB/s | | | | | |"
}

# ---- main ----------------------------------------------------------------

main() {
	local t0=$SECONDS z
	declare -gA DD
	log "work folder $WORK"
	log "building malachi from $REPO"
	(cd "$REPO" && go build -o "$WORK/malachi" ./cmd/malachi) || die "building malachi failed"
	mkdir -p "$DATA"
	LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
	if awk -v l="$LOAD_START" -v n="$(nproc)" 'BEGIN {exit !(l > n / 4)}'; then
		log "warning: load average $LOAD_START on $(nproc) CPUs: other work is running and will skew the numbers"
	fi
	run_dd start
	start_node "$DATA"
	log "node $NODE_PID on 127.0.0.1:$PORT, data in $DATA"
	: >"$RESULTS"
	local first=v2
	for z in "${SIZES[@]}"; do
		both "$first" "produce-$z" produce --topic "p$z-@WIRE@" --records "${RECORDS[$z]}" --size "$z" --keys 0
		[[ $first == v2 ]] && first=v1 || first=v2
	done
	# Both versions read the topic the v2 producer wrote: the same bytes.
	for z in "${SIZES[@]}"; do
		both "$first" "consume-$z" consume --topic "p$z-v2" --records "${RECORDS[$z]}" --via fetch
		[[ $first == v2 ]] && first=v1 || first=v2
	done
	both "$first" sync-128 produce --topic "sync-@WIRE@" --records "$SYNC_RECORDS" --size 128 --keys 0 --sync
	run_nats
	run_dd end
	report
	log "done in $((SECONDS - t0)) s"
}

main "$@"
