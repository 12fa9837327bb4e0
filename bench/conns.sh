#!/usr/bin/env bash
# bench/conns.sh: what connections cost, Malachi beside NATS in one run on
# this machine. Prints one markdown table.
#
# Usage: bench/conns.sh                 (2-3 minutes on 2 cores, plus the
#                                        NATS install the first time)
#        NATS=0 bench/conns.sh          (Malachi alone)
#        N_LARGE=2000 RESTART_N=2000 RESTART_PASSWORD_N=100 bench/conns.sh   (a short check)
#
# What it does (every server on loopback, on a fresh data folder, started
# and stopped by this script; the client side is bench/conns, a Go program
# built from this checkout):
#   1. Malachi (`malachi serve --dev`, connection limits raised to fit):
#      one control connection logs in by password; then N_SMALL and
#      N_LARGE idle connections, each resuming the control connection's
#      login session (session_auth). RSS per connection = the node's VmRSS
#      after SETTLE of quiet, minus its VmRSS with the control connection
#      alone, divided by the connections.
#   2. Long-poll wake: a fetch parked on each of the N_LARGE connections
#      (RSS read again), one produce wakes them all; p50 / p99 / max of the
#      time from the produce's ack to each waiter's answer (a waiter
#      answered before the ack counts 0), and from the produce's send.
#   3. Step 1 again on a fresh node with --tls-cert/--tls-key (dev-certs),
#      every connection over TLS.
#   4. NATS (nats-server, no JetStream, user and password required):
#      steps 1 and 2 with idle connections subscribed to one subject and
#      one publish (acknowledged by the PONG of a PING sent after it), then
#      step 1 again with TLS required.
#   5. Restart: RESTART_PASSWORD_N Go clients (pkg/client) log in by
#      password, all at once, paced by the node's refusals and retry hints
#      (WithDialRetry), and RESTART_N log in with a JWT (a throwaway
#      issuer: 10,000 password logins would take 10,000 argon2id hashes,
#      minutes on 2 cores). The node is killed (SIGKILL) and started again
#      on the same data folder; every client then makes one call that must
#      succeed, redialling and resuming its login session by itself. The
#      table shows the time from the restart to each group's last client
#      served. The password group's first logins are the cost a restart
#      would have without resumption.
#
# Environment (defaults in brackets):
#   N_SMALL [1000] N_LARGE [10000]   idle connection counts
#   RESTART_N [10000]                Go clients logging in first by JWT
#   RESTART_PASSWORD_N [500]         Go clients logging in first by password
#   SETTLE [3s]                      quiet time before each RSS reading
#   NATS [1]                         0 skips NATS
#   STEPS [malachi nats restart]     the steps to run (malachi: 1-3, nats: 4,
#                                    restart: 5)
#   PORT [14240]                     Malachi's client port (PORT+1: HTTP)
#   NATS_PORT [14242]
#   MALACHI_BENCH_CACHE [~/.cache/malachi-bench]   where nats-server is
#                                    installed (bin/), as bench/peers/nats.sh does
#   KEEP [0]                         1 keeps the work folder (logs, outputs)
#   CMD_TIMEOUT [600]                seconds before one step is abandoned
set -euo pipefail

N_SMALL=${N_SMALL:-1000}
N_LARGE=${N_LARGE:-10000}
RESTART_N=${RESTART_N:-10000}
RESTART_PASSWORD_N=${RESTART_PASSWORD_N:-500}
SETTLE=${SETTLE:-3s}
NATS=${NATS:-1}
STEPS=${STEPS:-malachi nats restart}
PORT=${PORT:-14240}
NATS_PORT=${NATS_PORT:-14242}
CACHE=${MALACHI_BENCH_CACHE:-$HOME/.cache/malachi-bench}
KEEP=${KEEP:-0}
CMD_TIMEOUT=${CMD_TIMEOUT:-600}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$REPO/bench/lib.sh"
NATS_SERVER_VERSION=$(sed -n 's/^NATS_SERVER_VERSION=//p' "$REPO/bench/peers/nats.sh")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/malachi-conns.XXXXXX")
RESULTS=$WORK/results.tsv # run name value
PIDS=()
NODE_PID=

trap cleanup EXIT
trap 'exit 130' INT TERM

isolate_env
# Room for every benchmark connection from one address, and no idle
# timeout during the run.
export MALACHI_MAX_TOTAL_CONN=$((N_LARGE + RESTART_N + RESTART_PASSWORD_N + 1000))
export MALACHI_MAX_CONN_PER_IP=$MALACHI_MAX_TOTAL_CONN
export MALACHI_MAX_PREAUTH_CONN=$MALACHI_MAX_TOTAL_CONN
export MALACHI_TCP_RECV_TIMEOUT=1h

# stop PID: stop a server this script started and wait for it.
stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	forget "$1"
}

# collect RUN OUT: append the driver's "result NAME VALUE" lines of OUT
# to RESULTS under RUN.
collect() {
	awk -F'\t' -v run="$1" '$1 == "result" {print run "\t" $2 "\t" $3}' "$2" >>"$RESULTS"
}

# idle RUN PID ARGS...: bench/conns idle against the server PID.
idle() {
	local run=$1 pid=$2
	shift 2
	log "$run: $N_SMALL and $N_LARGE idle connections"
	run_cmd "$WORK/out.$run" "$WORK/conns" idle -pid "$pid" -counts "$N_SMALL,$N_LARGE" -settle "$SETTLE" "$@"
	collect "$run" "$WORK/out.$run"
}

run_malachi() {
	start_node "$WORK/data-plain"
	idle malachi "$NODE_PID" -system malachi -addr "127.0.0.1:$PORT" -wake
	stop "$NODE_PID"
	start_node "$WORK/data-tls" --tls-cert "$WORK/certs/server.pem" --tls-key "$WORK/certs/server-key.pem"
	idle malachi-tls "$NODE_PID" -system malachi -addr "127.0.0.1:$PORT" -tls-ca "$WORK/certs/ca.pem"
	stop "$NODE_PID"
}

# start_nats NAME [EXTRA_CONFIG]: nats-server with user and password
# required; sets NATS_PID.
start_nats() {
	local name=$1 extra=${2:-}
	port_free "$NATS_PORT" || die "port $NATS_PORT is in use; set NATS_PORT"
	cat >"$WORK/$name.conf" <<-EOF
		server_name: $name
		listen: 127.0.0.1:$NATS_PORT
		max_connections: $((N_LARGE + 1000))
		authorization {
		  user: app
		  password: app123
		}
		$extra
	EOF
	"$CACHE/bin/nats-server" -c "$WORK/$name.conf" >"$WORK/$name.log" 2>&1 &
	NATS_PID=$!
	PIDS+=("$NATS_PID")
	wait_ready "$NATS_PID" "$WORK/$name.log" "Server is ready"
}

run_nats() {
	[[ $NATS == 1 ]] || return 0
	start_nats nats
	idle nats "$NATS_PID" -system nats -addr "127.0.0.1:$NATS_PORT" -wake
	stop "$NATS_PID"
	start_nats nats-tls "tls {"$'\n'"  cert_file: \"$WORK/certs/server.pem\""$'\n'"  key_file: \"$WORK/certs/server-key.pem\""$'\n'"}"
	idle nats-tls "$NATS_PID" -system nats -addr "127.0.0.1:$NATS_PORT" -tls-ca "$WORK/certs/ca.pem"
	stop "$NATS_PID"
}

# run_restart: the clients connect, the node is killed and started again,
# and the driver, told the moment of the restart, times the clients.
run_restart() {
	local jwt ctl=$WORK/restart.ctl out=$WORK/out.restart driver i t0
	"$WORK/conns" jwks -dir "$WORK" >"$WORK/jwt.flags" || die "conns jwks failed"
	read -r -a jwt <"$WORK/jwt.flags"
	start_node "$WORK/data-restart" "${jwt[@]}"
	log "restart: $RESTART_PASSWORD_N clients logging in by password, $RESTART_N by JWT"
	mkfifo "$ctl"
	"$WORK/conns" restart -addr "127.0.0.1:$PORT" -n "$RESTART_N" -password-n "$RESTART_PASSWORD_N" \
		-jwt-key "$WORK/jwt.key" <"$ctl" >"$out" 2>"$WORK/err.restart" &
	driver=$!
	PIDS+=("$driver")
	exec 7>"$ctl"
	for ((i = 0; i < CMD_TIMEOUT * 10; i++)); do
		grep -q '^ready' "$out" && break
		kill -0 "$driver" 2>/dev/null || die "the restart driver exited:"$'\n'"$(tail -20 "$WORK/err.restart")"
		sleep 0.1
	done
	grep -q '^ready' "$out" || die "the restart clients are not connected after $CMD_TIMEOUT s"
	kill -KILL "$NODE_PID"
	wait "$NODE_PID" 2>/dev/null || true
	forget "$NODE_PID"
	t0=$(date +%s%N)
	echo "go $t0" >&7
	exec 7>&-
	# The audit log records how each client logged in again.
	start_node "$WORK/data-restart" "${jwt[@]}" --audit-log "$WORK/audit.log"
	printf 'restart\tnode_ready_s\t%s\n' "$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN {printf "%.2f", (b-a)/1e9}')" >>"$RESULTS"
	wait "$driver" || die "the restart driver failed:"$'\n'"$(tail -20 "$WORK/err.restart")"
	forget "$driver"
	printf 'restart\tnode_cpu_s\t%s\n' "$(cpu_s "$NODE_PID")" >>"$RESULTS"
	collect restart "$out"
	stop "$NODE_PID"
	count_logins
}

# cpu_s PID: the CPU time (user and system) PID has used, in seconds.
cpu_s() {
	awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz}' "/proc/$1/stat"
}

# count_logins: the restarted node's successful logins by method, and
# whether its audit log dropped any (a gap in seq).
count_logins() {
	local m
	for m in session password token; do
		printf 'restart\tlogins_%s\t%s\n' "$m" \
			"$(grep '"type":"auth_success"' "$WORK/audit.log" | grep -c "\"method\":\"$m\"" || true)" >>"$RESULTS"
	done
	printf 'restart\taudit_dropped\t%s\n' "$(grep -c '"type":"audit_events_dropped"' "$WORK/audit.log" || true)" >>"$RESULTS"
}

# ---- report ----------------------------------------------------------------

get() { awk -F'\t' -v r="$1" -v n="$2" '$1 == r && $2 == n {print $3; exit}' "$RESULTS"; }
# cell RUN NAME UNIT: the value with its unit, or "-".
cell() {
	local v
	v=$(get "$1" "$2")
	[[ -n $v ]] && echo "$v$3" || echo "-"
}
commas() { awk -v n="$1" 'BEGIN {s = sprintf("%.0f", n); o = ""; while (length(s) > 3) {o = "," substr(s, length(s)-2) o; s = substr(s, 1, length(s)-3)}; print s o}'; }
# wake RUN WHAT: "p50 / p99 / max ms" of the wake times from WHAT (ack or send).
wake() {
	[[ -n $(get "$1" "wake_$2_p50_ms") ]] || { echo "-"; return; }
	echo "$(get "$1" "wake_$2_p50_ms") / $(get "$1" "wake_$2_p99_ms") / $(get "$1" "wake_$2_max_ms") ms"
}

report() {
	local n
	echo
	echo "Connections, $(date -u +'%Y-%m-%d %H:%M') UTC: malachi $(cd "$REPO" && git describe --always --dirty 2>/dev/null || echo "?"), $(go version | awk '{print $3}'),"
	echo "NATS $NATS_SERVER_VERSION (no JetStream, user and password required); $(nproc) CPUs, Linux $(uname -r); loopback."
	echo "Load average (1 min) before the runs $LOAD_START, after $(cut -d' ' -f1 /proc/loadavg): other work on the machine skews every number."
	echo "RSS per connection: the server's VmRSS after $SETTLE of quiet, less its VmRSS with one connection, over the connections."
	echo
	echo "| | Malachi | NATS | goal |"
	echo "|---|---:|---:|---|"
	for n in "$N_SMALL" "$N_LARGE"; do
		echo "| RSS per idle authenticated connection, $(commas "$n") connections (NATS: subscribed) |" \
			"$(cell malachi "idle_${n}_kib_per_conn" " KiB") | $(cell nats "idle_${n}_kib_per_conn" " KiB") | ≤ 32 KiB |"
	done
	for n in "$N_SMALL" "$N_LARGE"; do
		echo "| the same over TLS, $(commas "$n") connections |" \
			"$(cell malachi-tls "idle_${n}_kib_per_conn" " KiB") | $(cell nats-tls "idle_${n}_kib_per_conn" " KiB") | |"
	done
	echo "| RSS per connection with a long-poll fetch parked, $(commas "$N_LARGE") connections | $(cell malachi parked_kib_per_conn " KiB") | - | |"
	echo "| wake of $(commas "$N_LARGE") waiters by one message, p50 / p99 / max after the ack | $(wake malachi ack) | $(wake nats ack) | p99 ≤ 50 ms |"
	echo "| the same after the send (produce / publish), p50 / p99 / max | $(wake malachi send) | $(wake nats send) | |"
	echo "| the message's ack (produce: fsync'd; NATS: PONG), after the send | $(cell malachi wake_ack_ms " ms") | $(cell nats wake_ack_ms " ms") | |"
	echo "| CPU time of the server from the send to the last waiter's answer | $(cell malachi wake_server_cpu_ms " ms") | $(cell nats wake_server_cpu_ms " ms") | |"
	if [[ -n $(get restart restart_token_last_s) ]]; then
		echo "| restart: $(commas "$RESTART_N") Go clients (first login JWT) served again, p50 / last | $(get restart restart_token_p50_s) / $(get restart restart_token_last_s) s | - | last ≤ 5 s |"
	fi
	if [[ -n $(get restart restart_password_last_s) ]]; then
		echo "| restart: $(commas "$RESTART_PASSWORD_N") Go clients (password) served again, p50 / last | $(get restart restart_password_p50_s) / $(get restart restart_password_last_s) s | - | |"
		echo "| first logins by password of those $(commas "$RESTART_PASSWORD_N") clients, all at once (what a restart costs without resumption) | $(get restart login_password_s) s | - | |"
	fi
	echo "| restart: node killed, started again, ready (in the above) | $(cell restart node_ready_s " s") | - | |"
	echo "| restart: CPU time of the node from its start to the last client served / of the clients | $(cell restart node_cpu_s " s") / $(cell restart restart_clients_cpu_s " s") | - | |"
	echo
	echo "After the restart the node logged clients in $(cell restart logins_session "") times by session token, $(cell restart logins_password "") by password" \
		"and $(cell restart logins_token "") by JWT (audit log; events dropped: $(cell restart audit_dropped ""));"
	echo "calls that failed while the node was down and were made again: $(cell restart restart_failed_calls "")."
	echo "NATS answers the PING after a publish once it has written the message to every subscriber, so its"
	echo "\"after the ack\" is about 0 by construction: compare the rows \"after the send\"."
}

# ---- main ------------------------------------------------------------------

main() {
	local t0=$SECONDS
	log "work folder $WORK"
	[[ $NATS == 1 ]] && install_tool nats-server github.com/nats-io/nats-server/v2 "$NATS_SERVER_VERSION"
	log "building malachi and bench/conns from $REPO"
	(cd "$REPO" && go build -o "$WORK/malachi" ./cmd/malachi && go build -o "$WORK/conns" ./bench/conns) ||
		die "building failed"
	"$WORK/malachi" dev-certs "$WORK/certs" >"$WORK/dev-certs.log" 2>&1 || die "dev-certs failed: $(cat "$WORK/dev-certs.log")"
	LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
	if awk -v l="$LOAD_START" -v n="$(nproc)" 'BEGIN {exit !(l > n / 4)}'; then
		log "warning: load average $LOAD_START on $(nproc) CPUs: other work is running and will skew the numbers"
	fi
	: >"$RESULTS"
	[[ " $STEPS " == *" malachi "* ]] && run_malachi
	[[ " $STEPS " == *" nats "* ]] && run_nats
	[[ " $STEPS " == *" restart "* ]] && run_restart
	report
	log "done in $((SECONDS - t0)) s"
}

main "$@"
