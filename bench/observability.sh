#!/usr/bin/env bash
# bench/observability.sh: what metrics and traces cost. On one machine, in
# one run, alternating: a fresh `malachi serve --dev` with observability
# off, and one scraped every second on /metrics (HTTP Basic, as
# Prometheus would) and tracing at 1% to an OTLP/HTTP receiver that
# discards what it gets. Each runs `malachi bench produce` (128 B records,
# async) and `malachi bench consume` of what it produced. Prints one
# markdown table with every round and the medians.
#
# Usage: bench/observability.sh        (about 3-5 minutes on 2 cores)
#
# Environment (defaults in brackets):
#   ROUNDS [3]  RECORDS [1000000]  PORT [14250] (PORT+1: HTTP, PORT+2: OTLP)
#   CONSUMERS [1] consumers of the consume run, each reading all RECORDS
#   (more make the consume run longer and keep both cores busy)
#   SAMPLE [0.01] the trace sample ratio when on; SCRAPE [1] seconds
#   ON ["metrics traces"] what "on" turns on: metrics (the scraper),
#   traces (the OTLP endpoint), or both
#   CMD_TIMEOUT [300] seconds per command; KEEP [0] keeps the work folder
set -euo pipefail

ROUNDS=${ROUNDS:-3}
RECORDS=${RECORDS:-1000000}
CONSUMERS=${CONSUMERS:-1}
PORT=${PORT:-14250}
SAMPLE=${SAMPLE:-0.01}
SCRAPE=${SCRAPE:-1}
ON=${ON:-metrics traces}
CMD_TIMEOUT=${CMD_TIMEOUT:-300}
KEEP=${KEEP:-0}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$REPO/bench/lib.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/malachi-obs.XXXXXX")
PIDS=()
NODE_PID=
trap cleanup EXIT
trap 'exit 130' INT TERM

isolate_env
command -v python3 >/dev/null || die "python3 is needed for the OTLP receiver"
command -v curl >/dev/null || die "curl is needed for the scraper"

jstat() { grep -m1 -E "\"$2\": " "$1" | sed -E 's/.*: ([0-9.eE+-]+),?$/\1/'; }

log "building malachi"
(cd "$REPO" && go build -o "$WORK/malachi" ./cmd/malachi)

# The receiver answers every export with 200 and an empty protobuf
# answer, and counts the bytes it got.
OTLP=$((PORT + 2))
cat >"$WORK/otlp.py" <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    got = 0
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        H.got += len(self.rfile.read(n))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("ready", flush=True)
try:
    s.serve_forever()
finally:
    print("received", H.got, flush=True)
PY
python3 "$WORK/otlp.py" "$OTLP" >"$WORK/otlp.log" 2>&1 &
PIDS+=($!)
wait_ready "$!" "$WORK/otlp.log" ready

SCRAPER=
scrape_loop() {
	local n=0 fail=0
	while :; do
		if curl -fsS -u admin:admin123 "http://127.0.0.1:$((PORT + 1))/metrics" -o /dev/null; then
			n=$((n + 1))
		else
			fail=$((fail + 1))
		fi
		echo "$n $fail" >"$WORK/scrapes"
		sleep "$SCRAPE"
	done
}

TICK=$(getconf CLK_TCK)
# node_cpu: the node's user + system CPU seconds so far (the scraper's and
# the receiver's own CPU are not counted: only what the node spends).
node_cpu() { awk -v t="$TICK" '{printf "%.3f", ($14 + $15) / t}' "/proc/$NODE_PID/stat"; }
# per_rec BEFORE AFTER: CPU µs per record between two node_cpu readings.
per_rec() { awk -v b="$1" -v a="$2" -v n="${3:-$RECORDS}" 'BEGIN {printf "%.3f", (a - b) * 1e6 / n}'; }

# run_mode MODE ROUND: a fresh node, produce then consume; prints
# "produce consume produce-cpu consume-cpu": records/s, and the node's CPU
# µs per record (which a shared machine disturbs less than the rates).
run_mode() {
	local mode=$1 round=$2 flags=() p c
	rm -rf "$WORK/data"
	[[ $mode == on && $ON == *traces* ]] && flags+=(--otlp-endpoint "http://127.0.0.1:$OTLP" --trace-sample "$SAMPLE")
	start_node "$WORK/data" "${flags[@]}"
	if [[ $mode == on && $ON == *metrics* ]]; then
		scrape_loop &
		SCRAPER=$!
		PIDS+=("$SCRAPER")
	fi
	local t0 t1 t2
	t0=$(node_cpu)
	run_cmd "$WORK/p.$mode.$round" "$WORK/malachi" --server "127.0.0.1:$PORT" bench produce --topic obs --records "$RECORDS" --size 128 --json
	t1=$(node_cpu)
	run_cmd "$WORK/c.$mode.$round" "$WORK/malachi" --server "127.0.0.1:$PORT" bench consume --topic obs --records "$RECORDS" --consumers "$CONSUMERS" --json
	t2=$(node_cpu)
	if [[ -n $SCRAPER ]]; then
		kill "$SCRAPER" 2>/dev/null || true
		wait "$SCRAPER" 2>/dev/null || true
		forget "$SCRAPER"
		SCRAPER=
		read -r n fail <"$WORK/scrapes"
		((n > 0 && fail == 0)) || die "the scraper got $n pages and $fail failures"
	fi
	kill "$NODE_PID" 2>/dev/null || true
	wait "$NODE_PID" 2>/dev/null || true
	forget "$NODE_PID"
	p=$(jstat "$WORK/p.$mode.$round" records_per_s)
	c=$(jstat "$WORK/c.$mode.$round" records_per_s)
	echo "$p $c $(per_rec "$t0" "$t1") $(per_rec "$t1" "$t2" $((RECORDS * CONSUMERS)))"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

ROWS=()
: >"$WORK/off" && : >"$WORK/on"
for ((r = 1; r <= ROUNDS; r++)); do
	order=(off on)
	((r % 2 == 0)) && order=(on off)
	for mode in "${order[@]}"; do
		read -r p c pc cc < <(run_mode "$mode" "$r")
		echo "$p $c $pc $cc" >>"$WORK/$mode"
		log "round $r, $mode: produce $p rec/s ($pc µs/rec), consume $c rec/s ($cc µs/rec)"
		ROWS+=("| $r | $mode | $(printf "%'.0f" "$p") | $(printf "%'.0f" "$c") | $pc | $cc |")
	done
done

med() { cut -d' ' -f"$2" "$WORK/$1" | median; }
mp_off=$(med off 1) mc_off=$(med off 2) pc_off=$(med off 3) cc_off=$(med off 4)
mp_on=$(med on 1) mc_on=$(med on 2) pc_on=$(med on 3) cc_on=$(med on 4)
echo
echo "| round | metrics + traces | produce rec/s | consume rec/s | node CPU µs/rec, produce | node CPU µs/rec, consume |"
echo "|---:|---|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
printf '| median | off | %'"'"'.0f | %'"'"'.0f | %.3f | %.3f |\n' "$mp_off" "$mc_off" "$pc_off" "$cc_off"
printf '| median | on (%s; scraped every %s s, traces at %s) | %'"'"'.0f | %'"'"'.0f | %.3f | %.3f |\n' "$ON" "$SCRAPE" "$SAMPLE" "$mp_on" "$mc_on" "$pc_on" "$cc_on"
awk -v a="$mp_on" -v b="$mp_off" -v c="$mc_on" -v d="$mc_off" -v e="$pc_on" -v f="$pc_off" -v g="$cc_on" -v h="$cc_off" \
	'BEGIN {printf "| on / off | | %+.1f%% | %+.1f%% | %+.1f%% | %+.1f%% |\n", (a / b - 1) * 100, (c / d - 1) * 100, (e / f - 1) * 100, (g / h - 1) * 100}'
