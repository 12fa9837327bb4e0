#!/usr/bin/env bash
# bench/peers/nats.sh: Malachi against NATS JetStream on loopback, with
# matched workloads run alternately (NATS then Malachi, then Malachi then
# NATS on the next round, ...), and the peak RSS of each server.
#
# Usage: bench/peers/nats.sh            (defaults: 3 rounds of 1,000,000 records)
#        ROUNDS=1 RECORDS=50000 bench/peers/nats.sh    (a short check)
#        SIZES="128 1024" RECORDS="1000000 300000" bench/peers/nats.sh
#        SYSTEMS=nats WORKLOADS="async consume-ordered" RESULTS_OUT=f.tsv bench/peers/nats.sh
#
# Environment (defaults in brackets):
#   ROUNDS [3]              rounds of every workload
#   RECORDS [1000000]       records of the async publish and consume workloads
#   FSYNC_RECORDS [100000]  records of the async publish against NATS with
#                           sync_interval: always (about 7k msgs/s there, so
#                           1M would take minutes per round); capped at RECORDS
#   SYNC_RECORDS [20000]    records of the one-at-a-time publish (latency)
#   SIZE [128]              record size in bytes
#   SIZES [$SIZE]           record sizes, each run through every workload in
#                           turn; RECORDS, FSYNC_RECORDS and SYNC_RECORDS are
#                           then one number for all sizes or one per size
#   SYSTEMS [nats malachi]  the systems to run ("nats" alone: no Malachi
#                           build, node or columns)
#   WORKLOADS [async consume-ordered consume-durable async-fsync sync sync-fsync]
#                           the workloads to run; the consumes read what
#                           async wrote, so they need it
#   RESULTS_OUT []          also copy the per-run values (TSV) to this file
#   NATS_BATCH [500]        nats bench --batch (async publishes in flight)
#   MALACHI_FLAGS []        extra flags for every `malachi bench produce`
#                           (for example "--batch 500 --linger 1ms")
#   MALACHI_BENCH_CACHE [~/.cache/malachi-bench]  where nats-server and nats
#                           are installed (bin/) and results kept (results/)
#   NATS_PORT [14222] NATS_FSYNC_PORT [14223] MALACHI_PORT [14040]
#   MALACHI_HTTP_PORT [14041]
#   KEEP [0]                1 keeps the work folder (data, logs)
#   CMD_TIMEOUT [600]       seconds before one benchmark command is abandoned
#
# Servers: nats-server -js with file storage (default sync_interval, so no
# fsync per write), a second nats-server with `sync_interval: always` (an
# fsync per write, which is what Malachi does before every ack), and
# `malachi serve --dev` on a fresh data folder. Every process this script
# starts is stopped by PID on exit.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
RECORDS=${RECORDS:-1000000}
FSYNC_RECORDS=${FSYNC_RECORDS:-100000}
SYNC_RECORDS=${SYNC_RECORDS:-20000}
SIZE=${SIZE:-128}
SIZES=${SIZES:-$SIZE}
SYSTEMS=${SYSTEMS:-nats malachi}
WORKLOADS=${WORKLOADS:-async consume-ordered consume-durable async-fsync sync sync-fsync}
RESULTS_OUT=${RESULTS_OUT:-}
NATS_BATCH=${NATS_BATCH:-500}
MALACHI_FLAGS=${MALACHI_FLAGS:-}
CACHE=${MALACHI_BENCH_CACHE:-$HOME/.cache/malachi-bench}
NATS_PORT=${NATS_PORT:-14222}
NATS_FSYNC_PORT=${NATS_FSYNC_PORT:-14223}
MALACHI_PORT=${MALACHI_PORT:-14040}
MALACHI_HTTP_PORT=${MALACHI_HTTP_PORT:-14041}
KEEP=${KEEP:-0}
CMD_TIMEOUT=${CMD_TIMEOUT:-600}

NATS_SERVER_VERSION=v2.15.2
NATS_CLI_VERSION=v0.5.0
read -r -a SIZE_LIST <<<"$SIZES"

# per_size LIST I: the I-th number of LIST, or its only one.
per_size() {
	local -a v
	read -r -a v <<<"$1"
	if ((${#v[@]} == 1)); then
		echo "${v[0]}"
	elif ((${#v[@]} == ${#SIZE_LIST[@]})); then
		echo "${v[$2]}"
	else
		echo "error: '$1' must hold one number or one per size ($SIZES)" >&2
		exit 2
	fi
}
wants() { [[ " $2 " == *" $1 "* ]]; } # wants WORD LIST

# STREAM_BYTES is the --maxbytes of the NATS stream: room for the largest
# size's records (nats bench's default, 1 GB, refuses 100,000 x 16 KiB).
STREAM_BYTES=1073741824
for i in "${!SIZE_LIST[@]}"; do
	n=$(($(per_size "$RECORDS" "$i") * (SIZE_LIST[i] + 128)))
	if ((n > STREAM_BYTES)); then STREAM_BYTES=$n; fi
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../lib.sh
source "$REPO/bench/lib.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/malachi-vs-nats.XXXXXX")
RESULTS=$WORK/results.tsv # workload system metric round value rss_kb size
PIDS=()

trap cleanup EXIT

# forget PID: drop a reaped process from PIDS, so that cleanup never
# signals a PID the system may have given to another process since.
trap 'exit 130' INT TERM

# ---- install and build -------------------------------------------------

# install_tool BIN MODULE VERSION: lib.sh.

build() {
	install_tool nats-server github.com/nats-io/nats-server/v2 "$NATS_SERVER_VERSION"
	install_tool nats github.com/nats-io/natscli/nats "$NATS_CLI_VERSION"
	wants malachi "$SYSTEMS" || return 0
	log "building malachi"
	(cd "$REPO" && go build -o "$WORK/malachi" ./cmd/malachi) || die "building malachi failed"
}

# ---- servers ---------------------------------------------------------

# wait_ready PID LOG PATTERN: lib.sh.

# start_nats NAME PORT EXTRA_JETSTREAM_CONFIG: sets STARTED to its PID.
start_nats() {
	local name=$1 port=$2 extra=$3
	cat >"$WORK/$name.conf" <<-EOF
		server_name: $name
		listen: 127.0.0.1:$port
		jetstream {
		  store_dir: "$WORK/$name-data"
		  $extra
		}
	EOF
	"$CACHE/bin/nats-server" -c "$WORK/$name.conf" >"$WORK/$name.log" 2>&1 &
	STARTED=$!
	PIDS+=("$STARTED")
	wait_ready "$STARTED" "$WORK/$name.log" "Server is ready"
}

start_servers() {
	local p ports=("$NATS_PORT" "$NATS_FSYNC_PORT")
	wants malachi "$SYSTEMS" && ports+=("$MALACHI_PORT" "$MALACHI_HTTP_PORT")
	for p in "${ports[@]}"; do
		port_free "$p" || die "port $p is in use; set NATS_PORT, NATS_FSYNC_PORT, MALACHI_PORT or MALACHI_HTTP_PORT"
	done
	start_nats nats "$NATS_PORT" ""
	NATS_PID=$STARTED
	start_nats nats-fsync "$NATS_FSYNC_PORT" "sync_interval: always"
	NATS_FSYNC_PID=$STARTED
	if ! wants malachi "$SYSTEMS"; then
		log "servers up: nats $NATS_PID, nats-fsync $NATS_FSYNC_PID"
		return
	fi
	"$WORK/malachi" serve --dev --data-dir "$WORK/malachi-data" --log-level warn \
		--listen "127.0.0.1:$MALACHI_PORT" --http "127.0.0.1:$MALACHI_HTTP_PORT" >"$WORK/malachi.log" 2>&1 &
	MALACHI_PID=$!
	PIDS+=("$MALACHI_PID")
	wait_ready "$MALACHI_PID" "$WORK/malachi.log" "^ready"
	log "servers up: nats $NATS_PID, nats-fsync $NATS_FSYNC_PID, malachi $MALACHI_PID"
}

# ---- measuring ---------------------------------------------------------

# Peak RSS per workload: reset the server's high-water mark (VmHWM) through
# /proc/PID/clear_refs before the command and read it after. Where the
# reset is refused, sample VmRSS in the background instead.

SAMPLER=
start_rss() { # PID
	RSS_RESET=0
	if echo 5 >"/proc/$1/clear_refs" 2>/dev/null; then
		RSS_RESET=1
		return
	fi
	: >"$WORK/rss.samples"
	(while kill -0 "$1" 2>/dev/null; do rss_kb "$1" VmRSS >>"$WORK/rss.samples"; sleep 0.05; done) &
	SAMPLER=$!
	PIDS+=("$SAMPLER")
}

stop_rss() { # PID: sets RSS to the peak in kB
	if [[ $RSS_RESET == 1 ]]; then
		RSS=$(rss_kb "$1" VmHWM)
		return
	fi
	kill "$SAMPLER" 2>/dev/null || true
	wait "$SAMPLER" 2>/dev/null || true
	forget "$SAMPLER"
	RSS=$(sort -n "$WORK/rss.samples" | tail -1)
}

# run_cmd OUT CMD...: run one benchmark command, its output to OUT. It
# runs in the background and is waited for, so that a signal reaches the
# script (and its cleanup) at once rather than when the command ends.

# record WORKLOAD SYSTEM METRIC ROUND VALUE RSS_KB, at the current $CUR_SIZE.
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" "$CUR_SIZE" >>"$RESULTS"; }

# nats_stat FILE FIELD: from "... stats: 97,756 msgs/sec ~ ... ~ P50: 3,912.15us ~ ..."
# FIELD rate gives msgs/s; P50, P99 give microseconds.
nats_stat() {
	local line
	line=$(grep -m1 ' stats: ' "$1") || die "no stats line in $1"
	if [[ $2 == rate ]]; then
		sed -E 's/.* stats: ([0-9,.]+) msgs\/sec.*/\1/' <<<"$line" | tr -d ,
		return
	fi
	sed -E "s/.* $2: ([0-9,.]+)(us|ms|s) .*/\1 \2/; s/.* $2: ([0-9,.]+)(us|ms|s)$/\1 \2/" <<<"$line" | tr -d , |
		awk '{v=$1; if ($2=="ms") v*=1000; else if ($2=="s") v*=1e6; printf "%.1f\n", v}'
}

# malachi_stat FILE KEY: the first "KEY": value of a --json result (the
# top-level stats come before any nested ones).
malachi_stat() {
	grep -m1 -E "\"$2\": " "$1" | sed -E 's/.*: ([0-9.eE+-]+),?$/\1/'
}

# nats_run WORKLOAD ROUND SERVER_PID URL ARGS...: one `nats bench js ARGS`.
nats_run() {
	local wl=$1 round=$2 pid=$3 url=$4 out
	shift 4
	out=$WORK/out.$wl.$CUR_SIZE.nats.$round
	start_rss "$pid"
	run_cmd "$out" "$CACHE/bin/nats" --no-context -s "$url" bench js "$@" --no-progress
	stop_rss "$pid"
	record "$wl" nats rate "$round" "$(nats_stat "$out" rate)" "$RSS"
	if [[ $wl == sync* ]]; then
		record "$wl" nats p50_us "$round" "$(nats_stat "$out" P50)" "$RSS"
		record "$wl" nats p99_us "$round" "$(nats_stat "$out" P99)" "$RSS"
	fi
	log "  nats    $wl ${CUR_SIZE} B: $(nats_stat "$out" rate) msgs/s, peak RSS $((RSS / 1024)) MiB"
}

# malachi_run WORKLOAD ROUND produce|consume ARGS...: one `malachi bench`.
malachi_run() {
	local wl=$1 round=$2 out
	shift 2
	local args=("$@" --server "127.0.0.1:$MALACHI_PORT" --json)
	if [[ $1 == produce && -n $MALACHI_FLAGS ]]; then
		local extra
		read -r -a extra <<<"$MALACHI_FLAGS"
		args+=("${extra[@]}")
	fi
	out=$WORK/out.$wl.$CUR_SIZE.malachi.$round
	start_rss "$MALACHI_PID"
	run_cmd "$out" "$WORK/malachi" bench "${args[@]}"
	stop_rss "$MALACHI_PID"
	record "$wl" malachi rate "$round" "$(malachi_stat "$out" records_per_s)" "$RSS"
	if [[ $wl == sync* ]]; then
		record "$wl" malachi p50_us "$round" "$(malachi_stat "$out" p50_us)" "$RSS"
		record "$wl" malachi p99_us "$round" "$(malachi_stat "$out" p99_us)" "$RSS"
	fi
	log "  malachi $wl ${CUR_SIZE} B: $(malachi_stat "$out" records_per_s | cut -d. -f1) rec/s, peak RSS $((RSS / 1024)) MiB"
}

# pair WORKLOAD FIRST ROUND: run the NATS and Malachi sides of one
# workload, NATS first when FIRST is nats, if WORKLOADS names it and for
# the systems SYSTEMS names. The sides are the functions side_nats and
# side_malachi, set by the caller.
pair() {
	wants "$1" "$WORKLOADS" || return 0
	sides "$2" "$3"
}

# sides FIRST ROUND: side_nats and side_malachi, FIRST first, of the
# systems SYSTEMS names.
sides() {
	local s order=(nats malachi)
	[[ $1 == nats ]] || order=(malachi nats)
	for s in "${order[@]}"; do
		if wants "$s" "$SYSTEMS"; then
			"side_$s" "$2"
		fi
	done
}

# ---- workloads ---------------------------------------------------------

N_URL() { echo "nats://127.0.0.1:$NATS_PORT"; }
F_URL() { echo "nats://127.0.0.1:$NATS_FSYNC_PORT"; }

round() {
	local r=$1 i
	for i in "${!SIZE_LIST[@]}"; do
		CUR_SIZE=${SIZE_LIST[$i]}
		CUR_RECORDS=$(per_size "$RECORDS" "$i")
		CUR_FSYNC=$(per_size "$FSYNC_RECORDS" "$i")
		CUR_SYNC=$(per_size "$SYNC_RECORDS" "$i")
		CUR_FSYNC=$((CUR_FSYNC < CUR_RECORDS ? CUR_FSYNC : CUR_RECORDS))
		CUR_SYNC=$((CUR_SYNC < CUR_RECORDS ? CUR_SYNC : CUR_RECORDS))
		round_size "$r"
	done
}

# round_size ROUND: every workload at $CUR_SIZE.
round_size() {
	local r=$1 first=nats
	((r % 2 == 0)) && first=malachi
	log "round $r of $ROUNDS, ${CUR_SIZE} B records ($first first)"
	local topic=r$r-s$CUR_SIZE-async

	side_nats() { nats_run async "$1" "$NATS_PID" "$(N_URL)" pub async bench.s --create --storage file --replicas 1 --maxbytes "$STREAM_BYTES" \
		--msgs "$CUR_RECORDS" --size "$CUR_SIZE" --batch "$NATS_BATCH" --purge; }
	side_malachi() { malachi_run async "$1" produce --topic "$topic" --records "$CUR_RECORDS" --size "$CUR_SIZE" --keys 0; }
	pair async "$first" "$r"

	# Consume what the async workload just wrote. The durable consumer is
	# removed first so that every round reads the stream from its start.
	side_nats() { nats_run consume-ordered "$1" "$NATS_PID" "$(N_URL)" ordered --msgs "$CUR_RECORDS"; }
	side_malachi() { malachi_run consume-ordered "$1" consume --topic "$topic" --records "$CUR_RECORDS" --via fetch; }
	pair consume-ordered "$first" "$r"
	side_nats() {
		"$CACHE/bin/nats" --no-context -s "$(N_URL)" consumer rm benchstream nats-bench -f >/dev/null 2>&1 || true
		nats_run consume-durable "$1" "$NATS_PID" "$(N_URL)" consume --msgs "$CUR_RECORDS" --batch "$NATS_BATCH"
	}
	side_malachi() { malachi_run consume-durable "$1" consume --topic "$topic" --records "$CUR_RECORDS" --via group; }
	pair consume-durable "$first" "$r"

	side_nats() { nats_run async-fsync "$1" "$NATS_FSYNC_PID" "$(F_URL)" pub async bench.s --create --storage file --maxbytes "$STREAM_BYTES" \
		--replicas 1 --msgs "$CUR_FSYNC" --size "$CUR_SIZE" --batch "$NATS_BATCH" --purge; }
	side_malachi() { malachi_run async-fsync "$1" produce --topic "r$r-s$CUR_SIZE-fsync" --records "$CUR_FSYNC" --size "$CUR_SIZE" --keys 0; }
	pair async-fsync "$first" "$r"

	# One record per request, waiting for each ack. Malachi has one
	# durability mode (fsync before ack), so its run serves both rows.
	wants sync "$WORKLOADS" || wants sync-fsync "$WORKLOADS" || return 0
	side_nats() {
		if wants sync "$WORKLOADS"; then
			nats_run sync "$1" "$NATS_PID" "$(N_URL)" pub sync bench.s --create --storage file --replicas 1 --maxbytes "$STREAM_BYTES" \
				--msgs "$CUR_SYNC" --size "$CUR_SIZE" --purge
		fi
		if wants sync-fsync "$WORKLOADS"; then
			nats_run sync-fsync "$1" "$NATS_FSYNC_PID" "$(F_URL)" pub sync bench.s --create --storage file --replicas 1 --maxbytes "$STREAM_BYTES" \
				--msgs "$CUR_SYNC" --size "$CUR_SIZE" --purge
		fi
	}
	side_malachi() {
		malachi_run sync "$1" produce --topic "r$1-s$CUR_SIZE-sync" --records "$CUR_SYNC" --size "$CUR_SIZE" --keys 0 --sync
		awk -F'\t' -v r="$1" -v z="$CUR_SIZE" 'BEGIN {OFS=FS} $1=="sync" && $2=="malachi" && $4==r && $7==z {$1="sync-fsync"; print}' \
			"$RESULTS" >>"$RESULTS.tmp"
		cat "$RESULTS.tmp" >>"$RESULTS" && rm -f "$RESULTS.tmp"
	}
	sides "$first" "$r"
}

# ---- report --------------------------------------------------------------

# median: of the numbers on stdin ("-" if none).
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
# column_of WORKLOAD SYSTEM METRIC SIZE COLUMN: that column (5 value, 6
# rss_kb) of every round.
column_of() {
	awk -F'\t' -v w="$1" -v s="$2" -v m="$3" -v z="$4" -v c="$5" '$1==w && $2==s && $3==m && $7==z {print $c}' "$RESULTS"
}
# peak_mib WORKLOAD SYSTEM SIZE: the highest peak RSS of the rounds, in MiB.
peak_mib() { column_of "$1" "$2" rate "$3" 6 | sort -n | tail -1 | awk '{printf "%.0f", $1/1024}'; }
# whole N: N rounded, or "-".
whole() { awk -v n="$1" 'BEGIN {if (n ~ /^[0-9.eE+-]+$/) printf "%.0f", n; else print "-"}'; }

report() {
	local fmt='%-48s %12s %12s %7s %9s %9s\n'
	echo
	echo "Malachi vs NATS JetStream $NATS_SERVER_VERSION: loopback, file storage, R1, one client, record sizes: $SIZES B."
	echo "Medians of $ROUNDS round(s); ratio = Malachi / NATS (msgs/s: higher is better; us: lower is better);"
	echo "peak RSS in MiB, highest of the rounds. Malachi fsyncs before every ack; \"NATS fsync\" is sync_interval: always."
	echo
	# shellcheck disable=SC2059
	printf "$fmt" workload NATS Malachi ratio "NATS RSS" "Mal. RSS"
	local row wl metric label n m i z nrec nfs nsync
	for i in "${!SIZE_LIST[@]}"; do
		z=${SIZE_LIST[$i]}
		nrec=$(per_size "$RECORDS" "$i")
		nfs=$(per_size "$FSYNC_RECORDS" "$i")
		nsync=$(per_size "$SYNC_RECORDS" "$i")
		nfs=$((nfs < nrec ? nfs : nrec))
		nsync=$((nsync < nrec ? nsync : nrec))
		for row in \
			"async|rate|async publish x$nrec, msgs/s" \
			"async-fsync|rate|async x$nfs, NATS fsync, msgs/s" \
			"sync|rate|sync publish x$nsync, msgs/s" \
			"sync|p50_us|sync publish p50, us" \
			"sync|p99_us|sync publish p99, us" \
			"sync-fsync|rate|sync publish, NATS fsync, msgs/s" \
			"sync-fsync|p50_us|sync p50, NATS fsync, us" \
			"sync-fsync|p99_us|sync p99, NATS fsync, us" \
			"consume-ordered|rate|consume ordered / fetch, msgs/s" \
			"consume-durable|rate|consume durable / group, msgs/s"; do
			IFS='|' read -r wl metric label <<<"$row"
			wants "$wl" "$WORKLOADS" || continue
			n=$(column_of "$wl" nats "$metric" "$z" 5 | median)
			m=$(column_of "$wl" malachi "$metric" "$z" 5 | median)
			# shellcheck disable=SC2059
			printf "$fmt" "$z B: $label" "$(whole "$n")" "$(whole "$m")" \
				"$(awk -v n="$n" -v m="$m" 'BEGIN {if (n + 0 > 0 && m ~ /^[0-9]/) printf "%.2f", m/n; else print "-"}')" \
				"$(peak_mib "$wl" nats "$z")" "$(peak_mib "$wl" malachi "$z")"
		done
	done
	mkdir -p "$CACHE/results"
	local keep
	keep=$CACHE/results/$(date +%Y%m%d-%H%M%S).tsv
	cp "$RESULTS" "$keep"
	if [[ -n $RESULTS_OUT ]]; then
		cp "$RESULTS" "$RESULTS_OUT"
	fi
	echo
	echo "per-round values (workload system metric round value rss_kb size): $keep"
}

main() {
	local t0=$SECONDS r
	log "work folder $WORK; rounds $ROUNDS; sizes $SIZES; records $RECORDS (fsync $FSYNC_RECORDS, sync $SYNC_RECORDS); systems $SYSTEMS"
	build
	start_servers
	: >"$RESULTS"
	for ((r = 1; r <= ROUNDS; r++)); do
		round "$r"
	done
	report
	log "done in $((SECONDS - t0)) s"
}

main "$@"
