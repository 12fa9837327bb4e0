#!/usr/bin/env bash
# Compares two builds of malachi on this machine: for each round, each build
# in turn starts a fresh node (--dev, a temporary data directory), produces
# RECORDS records of SIZE bytes with `malachi bench produce`, reads them back
# with `malachi bench consume` (fetch), and stops. Rounds interleave the
# builds so drift in the machine affects both alike; the medians are
# printed last, with the node's peak RSS while producing (VmHWM, reset
# through /proc/PID/clear_refs first).
#
#   bench/compare-builds.sh OLD_BINARY NEW_BINARY [ROUNDS] [RECORDS]
#
# Environment: SIZE [128] value bytes; WIRE [v2] the wire version both
# builds' clients speak (v1 or v2).
#
# Build the binaries with e.g.
#   git worktree add /tmp/old <rev> && (cd /tmp/old && go build -o /tmp/malachi-old ./cmd/malachi)
#   go build -o /tmp/malachi-new ./cmd/malachi
set -euo pipefail
old=$1 new=$2 rounds=${3:-4} records=${4:-2000000}
size=${SIZE:-128} wire=${WIRE:-v2}
port=5160
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

one() { # binary label -> appends "label produce consume" to $work/results
	local bin=$1 label=$2 data="$work/data" pid
	rm -rf "$data"
	"$bin" serve --dev --data-dir "$data" --listen 127.0.0.1:$port --http 127.0.0.1:$((port + 1)) >"$work/log" 2>&1 &
	pid=$!
	for _ in $(seq 1 100); do grep -q '^ready' "$work/log" && break; sleep 0.1; done
	local p c rss
	echo 5 >"/proc/$pid/clear_refs" 2>/dev/null || true
	p=$(MALACHI_SERVER=127.0.0.1:$port "$bin" --wire "$wire" bench produce --records "$records" --size "$size" --topic cmp --json | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["records_per_s"]))')
	rss=$(awk '$1 == "VmHWM:" {print int($2 / 1024)}' "/proc/$pid/status")
	c=$(MALACHI_SERVER=127.0.0.1:$port "$bin" --wire "$wire" bench consume --records "$records" --topic cmp --json | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["records_per_s"]))')
	kill -INT $pid
	wait $pid 2>/dev/null || true
	echo "$label $p $c $rss" | tee -a "$work/results"
}

for r in $(seq 1 "$rounds"); do
	one "$old" old
	one "$new" new
done
python3 - "$work/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for label in ("old", "new"):
    p = [int(r[1]) for r in rows if r[0] == label]
    c = [int(r[2]) for r in rows if r[0] == label]
    m = [int(r[3]) for r in rows if r[0] == label]
    print(f"{label}: produce median {statistics.median(p):,.0f} rec/s, consume median {statistics.median(c):,.0f} rec/s, "
          f"node peak RSS producing median {statistics.median(m):,.0f} MiB")
PY
