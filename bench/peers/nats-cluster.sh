#!/usr/bin/env bash
# bench/peers/nats-cluster.sh: a 3-node Malachi cluster beside a 3-server
# NATS JetStream cluster (R3), on loopback, in one run: matched workloads
# run alternately (NATS first on odd rounds, Malachi first on even ones),
# then one markdown table with medians, ratios and the targets.
#
# Usage: bench/peers/nats-cluster.sh           (3 rounds of 1,000,000 records)
#        ROUNDS=1 RECORDS=100000 bench/peers/nats-cluster.sh   (a short check)
#
# Environment (defaults in brackets):
#   ROUNDS [3]              rounds of every workload
#   RECORDS [1000000]       records of the async produce and consume workloads
#   FSYNC_RECORDS [100000]  records of the async publish against the NATS
#                           cluster with sync_interval: always; capped at RECORDS
#   SYNC_RECORDS [10000]    records of each one-at-a-time produce (latency)
#   SIZE [128]              record size in bytes
#   WORKLOADS [async consume-ordered consume-durable async-fsync sync sync-fsync]
#                           the consumes read what async wrote, so they need it;
#                           async-fsync and sync-fsync need NATS_ALWAYS=1
#   NATS_ALWAYS [1]         1 also starts a second NATS cluster with
#                           sync_interval: always (an fsync per write)
#   NATS_BATCH [500]        nats bench --batch (async publishes in flight)
#   MALACHI_FLAGS []        extra flags for every async `malachi bench produce`
#   MALACHI_BENCH_CACHE [~/.cache/malachi-bench]  where nats-server and nats
#                           are installed (bin/) and results kept (results/)
#   NATS_PORT [14310]       NATS server i listens on NATS_PORT+10(i-1), routes +1
#   NATS_ALWAYS_PORT [14410]  the same for the sync_interval: always cluster
#   MALACHI_PORT [14540]    node i of the Malachi cluster: MALACHI_PORT+10(i-1)..+3
#   SINGLE_PORT [14640]     the single Malachi node (client; HTTP is +1)
#   RESULTS_OUT []          also copy the per-run values (TSV) to this file
#   KEEP [0]                1 keeps the work folder (data, logs, outputs)
#   CMD_TIMEOUT [600]       seconds before one benchmark command is abandoned
#
# What each side's ack means:
#   Malachi: a produce is acknowledged once a quorum (2 of 3) of its
#     segment's replicas, the primary's own copy included, has fsynced it.
#   NATS R3 (default sync_interval, 2 min): once the stream's Raft group has
#     the message on a quorum of servers, written but not fsynced.
#   NATS R3 with sync_interval: always: the same quorum, each server
#     fsyncing its writes.
#
# Placement: Malachi produces through node 1, which opens the segment and is
# its primary; Malachi consumes from the node that is primary of the fewest
# of the topic's records (a follower); the sync runs go through the primary
# and, separately, through a node that forwards to it. NATS clients connect
# to the stream's leader, NATS's best case. A single `malachi serve --dev`
# node gives the single-node sync latency the replicated one is held to.
# Every process this script starts is stopped by PID on exit.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
RECORDS=${RECORDS:-1000000}
FSYNC_RECORDS=${FSYNC_RECORDS:-100000}
SYNC_RECORDS=${SYNC_RECORDS:-10000}
SIZE=${SIZE:-128}
WORKLOADS=${WORKLOADS:-async consume-ordered consume-durable async-fsync sync sync-fsync}
NATS_ALWAYS=${NATS_ALWAYS:-1}
NATS_BATCH=${NATS_BATCH:-500}
MALACHI_FLAGS=${MALACHI_FLAGS:-}
CACHE=${MALACHI_BENCH_CACHE:-$HOME/.cache/malachi-bench}
NATS_PORT=${NATS_PORT:-14310}
NATS_ALWAYS_PORT=${NATS_ALWAYS_PORT:-14410}
MALACHI_PORT=${MALACHI_PORT:-14540}
SINGLE_PORT=${SINGLE_PORT:-14640}
RESULTS_OUT=${RESULTS_OUT:-}
KEEP=${KEEP:-0}
CMD_TIMEOUT=${CMD_TIMEOUT:-600}

NATS_SERVER_VERSION=v2.15.2
NATS_CLI_VERSION=v0.5.0
FSYNC_RECORDS=$((FSYNC_RECORDS < RECORDS ? FSYNC_RECORDS : RECORDS))
SYNC_RECORDS=$((SYNC_RECORDS < RECORDS ? SYNC_RECORDS : RECORDS))
# The NATS stream's --max-bytes: room for RECORDS, at least nats bench's 1 GB.
STREAM_BYTES=$((RECORDS * (SIZE + 128)))
((STREAM_BYTES > 1073741824)) || STREAM_BYTES=1073741824

wants() { [[ " $2 " == *" $1 "* ]]; } # wants WORD LIST
if [[ $NATS_ALWAYS != 1 ]]; then
	WORKLOADS=$(tr ' ' '\n' <<<"$WORKLOADS" | grep -v -x -e async-fsync -e sync-fsync | tr '\n' ' ')
fi

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../lib.sh
source "$REPO/bench/lib.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/malachi-vs-nats-r3.XXXXXX")
RESULTS=$WORK/results.tsv # workload system metric round value
PIDS=()
trap cleanup EXIT
trap 'exit 130' INT TERM
isolate_env

# ---- servers ---------------------------------------------------------

# nats_url BASE I: the client URL of server I (1-3) of the cluster at BASE.
nats_url() { echo "nats://127.0.0.1:$(($1 + 10 * ($2 - 1)))"; }
# nats CMD...: the NATS CLI, without the user's saved contexts.
nats() { "$CACHE/bin/nats" --no-context "$@"; }

# start_nats_cluster NAME BASE EXTRA_JETSTREAM_CONFIG: three servers NAME-1..3
# on client ports BASE, BASE+10, BASE+20 (routes one above each); returns
# once JetStream accepts an R3 stream.
start_nats_cluster() {
	local name=$1 base=$2 extra=$3 i routes=() url
	for i in 1 2 3; do
		routes+=("nats-route://127.0.0.1:$((base + 10 * (i - 1) + 1))")
	done
	for i in 1 2 3; do
		cat >"$WORK/$name-$i.conf" <<-EOF
			server_name: $name-$i
			listen: 127.0.0.1:$((base + 10 * (i - 1)))
			jetstream {
			  store_dir: "$WORK/$name-$i-data"
			  $extra
			}
			cluster {
			  name: $name
			  listen: 127.0.0.1:$((base + 10 * (i - 1) + 1))
			  routes: [$(
				IFS=,
				echo "${routes[*]}"
			)]
			}
		EOF
		"$CACHE/bin/nats-server" -c "$WORK/$name-$i.conf" >"$WORK/$name-$i.log" 2>&1 &
		PIDS+=("$!")
		NATS_PIDS+=("$name-$i:$!")
	done
	for i in 1 2 3; do
		wait_ready "$(pid_of "$name-$i")" "$WORK/$name-$i.log" "Server is ready"
	done
	# The meta group needs a leader before a stream can be placed.
	url=$(nats_url "$base" 1)
	for ((i = 0; i < 300; i++)); do
		if nats -s "$url" stream add probe --subjects probe --storage file --replicas 3 --defaults >/dev/null 2>&1; then
			nats -s "$url" stream rm probe -f >/dev/null
			return
		fi
		sleep 0.1
	done
	die "the NATS cluster $name has no JetStream meta leader after 30 s"
}

# pid_of NAME: the PID of server NAME (from NATS_PIDS and MALACHI_PIDS).
pid_of() {
	local e
	for e in "${NATS_PIDS[@]}" "${MALACHI_PIDS[@]}"; do
		[[ ${e%%:*} == "$1" ]] && echo "${e#*:}" && return
	done
	die "no server $1"
}

# start_malachi_cluster: `malachi dev --nodes 3`; sets DEV_PID and adds
# node-1..3 to MALACHI_PIDS.
start_malachi_cluster() {
	local out=$WORK/dev.out i
	"$WORK/malachi" dev --nodes 3 --data-dir "$WORK/cluster" --base-port "$MALACHI_PORT" \
		>"$out" 2>"$WORK/dev.log" &
	DEV_PID=$!
	PIDS+=("$DEV_PID")
	# dev prints its last line once every metadata group has its voters.
	for ((i = 0; i < CMD_TIMEOUT * 10; i++)); do
		grep -q '^Ctrl-C stops every node' "$out" && break
		kill -0 "$DEV_PID" 2>/dev/null || die "malachi dev exited:"$'\n'"$(tail -20 "$WORK/dev.log")"
		sleep 0.1
	done
	grep -q '^Ctrl-C stops every node' "$out" || die "the Malachi cluster did not form in ${CMD_TIMEOUT}s"
	while read -r name pid; do
		MALACHI_PIDS+=("$name:$pid")
	done < <(awk '$1 ~ /^node-/ && $2 == "client" {print $1, $NF}' "$out")
}

start_servers() {
	local p i ports=()
	for i in 0 10 20; do
		for p in 0 1; do ports+=($((NATS_PORT + i + p))); done
		[[ $NATS_ALWAYS == 1 ]] && for p in 0 1; do ports+=($((NATS_ALWAYS_PORT + i + p))); done
		for p in 0 1 2 3; do ports+=($((MALACHI_PORT + i + p))); done
	done
	ports+=("$SINGLE_PORT" $((SINGLE_PORT + 1)))
	for p in "${ports[@]}"; do
		port_free "$p" || die "port $p is in use; set NATS_PORT, NATS_ALWAYS_PORT, MALACHI_PORT or SINGLE_PORT"
	done
	NATS_PIDS=()
	MALACHI_PIDS=()
	start_nats_cluster nats "$NATS_PORT" ""
	[[ $NATS_ALWAYS == 1 ]] && start_nats_cluster nats-always "$NATS_ALWAYS_PORT" "sync_interval: always"
	start_malachi_cluster
	PORT=$SINGLE_PORT start_node "$WORK/single"
	MALACHI_PIDS+=("single:$NODE_PID")
	log "servers up: ${NATS_PIDS[*]} ${MALACHI_PIDS[*]} (malachi dev $DEV_PID)"
}

# ---- Malachi placement -----------------------------------------------

# mnode I: the client address of Malachi cluster node I.
mnode() { echo "127.0.0.1:$((MALACHI_PORT + 10 * ($1 - 1)))"; }
# madmin ADDR ARGS...: a malachi command as the dev administrator.
madmin() {
	local addr=$1
	shift
	"$WORK/malachi" --server "$addr" --user admin --password admin123 "$@"
}

# mcreate TOPIC: TOPIC with three replicas per segment, created through
# node 1.
mcreate() {
	madmin "$(mnode 1)" topic create "$1" --replicas 3 >"$WORK/create.out" 2>&1 ||
		die "creating topic $1 failed: $(cat "$WORK/create.out")"
}

# primaries TOPIC: "node records-it-is-primary-of total" for nodes 1-3, the
# primary of a segment being the first of its replica set.
primaries() {
	madmin "$(mnode 1)" topic describe "$1" -o json | python3 -c 'import json,sys
t = json.load(sys.stdin)
own = {1: 0, 2: 0, 3: 0}
total = 0
for r in t["ranges"]:
    for s in r["segments"]:
        n = int(s["replicas"][0].split("-")[1])
        own[n] = own.get(n, 0) + s["records"]
        total += s["records"]
for n in sorted(own):
    print(n, own[n], total)'
}

# follower_of TOPIC: the node among 2 and 3 that is primary of the fewest of
# TOPIC's records (node 1 produced them); logs the shares.
follower_of() {
	local best=2 least=-1 n own total
	while read -r n own total; do
		log "  $1: node-$n is primary of $own of $total records"
		if ((n != 1)) && ((least < 0 || own < least)); then
			best=$n
			least=$own
		fi
	done < <(primaries "$1")
	echo "$best"
}

# ---- measuring -------------------------------------------------------

record() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RESULTS"; } # WORKLOAD SYSTEM METRIC ROUND VALUE

# nats_stat FILE FIELD: as in nats.sh; rate gives msgs/s, P50 and P99 µs.
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

# malachi_stat FILE KEY: the first "KEY": value of a --json result.
malachi_stat() { grep -m1 -E "\"$2\": " "$1" | sed -E 's/.*: ([0-9.eE+-]+),?$/\1/'; }

# nats_stream BASE: a fresh R3 stream benchstream on the cluster at BASE;
# sets LEADER_URL to its leader's client URL.
nats_stream() {
	local url
	url=$(nats_url "$1" 1)
	nats -s "$url" stream rm benchstream -f >/dev/null 2>&1 || true
	nats -s "$url" stream add benchstream --subjects bench.s --storage file --replicas 3 \
		--max-bytes "$STREAM_BYTES" --defaults >/dev/null || die "creating the NATS stream failed"
	nats_leader "$1"
}

# nats_leader BASE: sets LEADER_URL to the leader of benchstream.
nats_leader() {
	local leader
	leader=$(nats -s "$(nats_url "$1" 1)" stream info benchstream --json |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["cluster"]["leader"])')
	LEADER_URL=$(nats_url "$1" "${leader##*-}")
	log "  nats stream leader: $leader"
}

# nats_run WORKLOAD SYSTEM ROUND URL ARGS...: one `nats bench js ARGS`.
nats_run() {
	local wl=$1 sys=$2 round=$3 url=$4 out
	shift 4
	out=$WORK/out.$wl.$sys.$round
	run_cmd "$out" "$CACHE/bin/nats" --no-context -s "$url" bench js "$@" --no-progress
	record "$wl" "$sys" rate "$round" "$(nats_stat "$out" rate)"
	if [[ $wl == sync* ]]; then
		record "$wl" "$sys" p50_us "$round" "$(nats_stat "$out" P50)"
		record "$wl" "$sys" p99_us "$round" "$(nats_stat "$out" P99)"
	fi
	log "  $sys $wl: $(nats_stat "$out" rate) msgs/s"
}

# malachi_run WORKLOAD SYSTEM ROUND ADDR produce|consume ARGS...
malachi_run() {
	local wl=$1 sys=$2 round=$3 addr=$4 out
	shift 4
	local args=("$@" --server "$addr" --json)
	if [[ $1 == produce && $wl == async* && -n $MALACHI_FLAGS ]]; then
		local extra
		read -r -a extra <<<"$MALACHI_FLAGS"
		args+=("${extra[@]}")
	fi
	out=$WORK/out.$wl.$sys.$round
	run_cmd "$out" "$WORK/malachi" bench "${args[@]}"
	record "$wl" "$sys" rate "$round" "$(malachi_stat "$out" records_per_s)"
	if [[ $wl == sync* ]]; then
		record "$wl" "$sys" p50_us "$round" "$(malachi_stat "$out" p50_us)"
		record "$wl" "$sys" p99_us "$round" "$(malachi_stat "$out" p99_us)"
	fi
	log "  $sys $wl via $addr: $(malachi_stat "$out" records_per_s | cut -d. -f1) rec/s"
}

# pair WORKLOAD FIRST ROUND: sides FIRST ROUND if WORKLOADS names WORKLOAD.
pair() {
	wants "$1" "$WORKLOADS" || return 0
	sides "$2" "$3"
}

# sides FIRST ROUND: side_nats and side_malachi (set by the caller), FIRST
# first.
sides() {
	if [[ $1 == nats ]]; then
		side_nats "$2"
		side_malachi "$2"
	else
		side_malachi "$2"
		side_nats "$2"
	fi
}

# ---- workloads -------------------------------------------------------

round() {
	local r=$1 first=nats follower
	((r % 2 == 0)) && first=malachi
	log "round $r of $ROUNDS ($first first)"
	local topic=r$r-async

	side_nats() {
		nats_stream "$NATS_PORT"
		nats_run async nats "$1" "$LEADER_URL" pub async bench.s --msgs "$RECORDS" --size "$SIZE" --batch "$NATS_BATCH"
	}
	side_malachi() {
		mcreate "$topic"
		malachi_run async malachi "$1" "$(mnode 1)" produce --topic "$topic" --records "$RECORDS" --size "$SIZE" --keys 0
	}
	pair async "$first" "$r"

	# Consume what async wrote: Malachi from a follower, NATS from the
	# leader. The durable consumer is removed first so that every round
	# reads the stream from its start.
	if wants async "$WORKLOADS"; then
		follower=$(follower_of "$topic")
		nats_leader "$NATS_PORT"
	fi
	side_nats() { nats_run consume-ordered nats "$1" "$LEADER_URL" ordered --msgs "$RECORDS"; }
	side_malachi() {
		malachi_run consume-ordered malachi "$1" "$(mnode "$follower")" consume --topic "$topic" --records "$RECORDS" --via fetch
	}
	pair consume-ordered "$first" "$r"
	side_nats() {
		nats -s "$LEADER_URL" consumer rm benchstream nats-bench -f >/dev/null 2>&1 || true
		nats_run consume-durable nats "$1" "$LEADER_URL" consume --msgs "$RECORDS" --batch "$NATS_BATCH"
	}
	side_malachi() {
		malachi_run consume-durable malachi "$1" "$(mnode "$follower")" consume --topic "$topic" --records "$RECORDS" --via group
	}
	pair consume-durable "$first" "$r"

	side_nats() {
		nats_stream "$NATS_ALWAYS_PORT"
		nats_run async-fsync nats-always "$1" "$LEADER_URL" pub async bench.s --msgs "$FSYNC_RECORDS" --size "$SIZE" --batch "$NATS_BATCH"
	}
	side_malachi() {
		mcreate "r$1-fsync"
		malachi_run async-fsync malachi "$1" "$(mnode 1)" produce --topic "r$1-fsync" --records "$FSYNC_RECORDS" --size "$SIZE" --keys 0
	}
	pair async-fsync "$first" "$r"

	# One record per request, waiting for each ack. Malachi's replicated
	# runs serve both the sync and the sync-fsync rows (one durability).
	wants sync "$WORKLOADS" || wants sync-fsync "$WORKLOADS" || return 0
	side_nats() {
		if wants sync "$WORKLOADS"; then
			nats_stream "$NATS_PORT"
			nats_run sync nats "$1" "$LEADER_URL" pub sync bench.s --msgs "$SYNC_RECORDS" --size "$SIZE"
		fi
		if wants sync-fsync "$WORKLOADS"; then
			nats_stream "$NATS_ALWAYS_PORT"
			nats_run sync nats-always "$1" "$LEADER_URL" pub sync bench.s --msgs "$SYNC_RECORDS" --size "$SIZE"
		fi
	}
	side_malachi() {
		local t=r$1-sync
		mcreate "$t"
		malachi_run sync malachi "$1" "$(mnode 1)" produce --topic "$t" --records "$SYNC_RECORDS" --size "$SIZE" --keys 0 --sync
		local p
		p=$(primaries "$t" | awk '$2 > 0 {print $1}')
		[[ $p == 1 ]] || log "  warning: $t's primary is node-$p, not node-1"
		malachi_run sync malachi-forwarded "$1" "$(mnode 2)" produce --topic "$t" --records "$SYNC_RECORDS" --size "$SIZE" --keys 0 --sync
		malachi_run sync malachi-single "$1" "127.0.0.1:$SINGLE_PORT" produce --topic "$t" --records "$SYNC_RECORDS" --size "$SIZE" --keys 0 --sync
	}
	sides "$first" "$r"
}

# ---- report ----------------------------------------------------------

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
# med WORKLOAD SYSTEM METRIC: the median over the rounds.
med() { awk -F'\t' -v w="$1" -v s="$2" -v m="$3" '$1==w && $2==s && $3==m {print $5}' "$RESULTS" | median; }
whole() { awk -v n="$1" 'BEGIN {if (n ~ /^[0-9][0-9.eE+-]*$/) printf "%.0f", n; else print "-"}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a ~ /^[0-9]/ && b + 0 > 0) printf "%.2f", a/b; else print "-"}'; }

# row LABEL NATS MALACHI TARGET: one table row, the ratio Malachi ÷ NATS.
row() { echo "| $1 | $(whole "$2") | $(whole "$3") | $(ratio "$3" "$2") | $4 |"; }

# verdict VALUE OP LIMIT: "met" or "not met".
verdict() { awk -v v="$1" -v l="$3" -v op="$2" 'BEGIN {if (v !~ /^[0-9]/) print "-"; else if ((op == ">=" && v >= l) || (op == "<=" && v <= l)) print "met"; else print "not met"}'; }

report() {
	local a_n a_m co_n co_m cd_n cd_m sp50 sp99 fp50 fp99 one50 one99 r
	a_n=$(med async nats rate)
	a_m=$(med async malachi rate)
	co_n=$(med consume-ordered nats rate)
	co_m=$(med consume-ordered malachi rate)
	cd_n=$(med consume-durable nats rate)
	cd_m=$(med consume-durable malachi rate)
	sp50=$(med sync malachi p50_us)
	sp99=$(med sync malachi p99_us)
	fp50=$(med sync malachi-forwarded p50_us)
	fp99=$(med sync malachi-forwarded p99_us)
	one50=$(med sync malachi-single p50_us)
	one99=$(med sync malachi-single p99_us)
	echo
	echo "Malachi, 3 nodes, --replicas 3, beside NATS JetStream $NATS_SERVER_VERSION, 3 servers, R3, file storage;"
	echo "loopback, one machine, ${SIZE} B records, medians of $ROUNDS round(s); ratio = Malachi / NATS."
	echo "Acks: Malachi after a quorum (2 of 3) fsynced; NATS R3 after a quorum stored the message, not"
	echo "fsynced (default sync_interval); NATS \"always\" rows: sync_interval: always on every server."
	echo "Malachi produces through the segments' primary and consumes from a follower; NATS clients use the stream leader."
	echo
	echo "| workload | NATS R3 | Malachi R3 | ratio | target |"
	echo "|---|---:|---:|---:|---|"
	if wants async "$WORKLOADS"; then
		row "async produce ×$RECORDS, msgs/s" "$a_n" "$a_m" "≥ 3× ($(verdict "$(ratio "$a_m" "$a_n")" ">=" 3))"
	fi
	if wants async-fsync "$WORKLOADS"; then
		row "async ×$FSYNC_RECORDS, NATS sync_interval: always, msgs/s" "$(med async-fsync nats-always rate)" "$(med async-fsync malachi rate)" ""
	fi
	if wants consume-ordered "$WORKLOADS"; then
		row "consume ordered / fetch from a follower, msgs/s" "$co_n" "$co_m" "≥ 2× ($(verdict "$(ratio "$co_m" "$co_n")" ">=" 2))"
	fi
	if wants consume-durable "$WORKLOADS"; then
		row "consume durable / group from a follower, msgs/s" "$cd_n" "$cd_m" ""
	fi
	if wants sync "$WORKLOADS"; then
		row "sync produce ×$SYNC_RECORDS through the primary, msgs/s" "$(med sync nats rate)" "$(med sync malachi rate)" ""
		row "sync p50, µs" "$(med sync nats p50_us)" "$sp50" ""
		row "sync p99, µs" "$(med sync nats p99_us)" "$sp99" ""
	fi
	if wants sync-fsync "$WORKLOADS"; then
		row "sync p50, NATS sync_interval: always, µs" "$(med sync nats-always p50_us)" "$sp50" ""
		row "sync p99, NATS sync_interval: always, µs" "$(med sync nats-always p99_us)" "$sp99" ""
	fi
	if wants sync "$WORKLOADS" || wants sync-fsync "$WORKLOADS"; then
		echo "| sync p50 / p99 through a non-primary node, µs | - | $(whole "$fp50") / $(whole "$fp99") | - | |"
		echo "| sync p50 / p99, single Malachi node, µs | - | $(whole "$one50") / $(whole "$one99") | - | |"
		r=$(ratio "$sp50" "$one50")
		echo
		echo "replicated sync p50 ÷ single-node sync p50: $r through the primary ($(verdict "$r" "<=" 1.5) against ≤ 1.5), $(ratio "$fp50" "$one50") through a non-primary node"
	fi
	echo
	echo "peak RSS over the run (VmHWM), MiB:$(for e in "${NATS_PIDS[@]}" "${MALACHI_PIDS[@]}"; do
		printf ' %s %s' "${e%%:*}" "$(awk -v k="$(rss_kb "${e#*:}" VmHWM)" 'BEGIN {printf "%.0f", k/1024}')"
	done)"
	mkdir -p "$CACHE/results"
	local keep
	keep=$CACHE/results/r3-$(date +%Y%m%d-%H%M%S).tsv
	cp "$RESULTS" "$keep"
	[[ -z $RESULTS_OUT ]] || cp "$RESULTS" "$RESULTS_OUT"
	echo "per-round values (workload system metric round value): $keep"
}

main() {
	local t0=$SECONDS r
	log "work folder $WORK; rounds $ROUNDS; records $RECORDS (fsync $FSYNC_RECORDS, sync $SYNC_RECORDS); size $SIZE"
	install_tool nats-server github.com/nats-io/nats-server/v2 "$NATS_SERVER_VERSION"
	install_tool nats github.com/nats-io/natscli/nats "$NATS_CLI_VERSION"
	log "building malachi"
	(cd "$REPO" && go build -o "$WORK/malachi" ./cmd/malachi) || die "building malachi failed"
	start_servers
	: >"$RESULTS"
	for ((r = 1; r <= ROUNDS; r++)); do
		round "$r"
	done
	report
	log "done in $((SECONDS - t0)) s"
}

main "$@"
