# Shell helpers shared by the benchmark scripts (sourced, not run).
# The caller sets PIDS=() (background processes to stop on exit), WORK (a
# scratch folder), KEEP (1 keeps WORK) and CMD_TIMEOUT (seconds one
# command may run), and traps EXIT with cleanup.

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
rss_kb() { awk -v f="$2" '$1 == f":" {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [[ $KEEP == 1 ]]; then
		log "work folder kept: $WORK"
	else
		rm -rf "$WORK"
	fi
}

forget() {
	local keep=() pid
	for pid in "${PIDS[@]}"; do
		[[ $pid == "$1" ]] || keep+=("$pid")
	done
	PIDS=("${keep[@]}")
}

run_cmd() {
	local out=$1 pid rc=0
	shift
	timeout "$CMD_TIMEOUT" "$@" >"$out" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	wait "$pid" || rc=$?
	forget "$pid"
	if ((rc != 0)); then
		log "command failed ($rc): $*"
		tail -20 "$out" >&2
		die "see $out (KEEP=1 keeps it)"
	fi
}

# start_node DATA [FLAGS...]: `malachi serve --dev` ($WORK/malachi) on data
# folder DATA at 127.0.0.1:PORT (HTTP PORT+1), logging to $WORK/node.log;
# sets NODE_PID and returns once the node is ready.
start_node() {
	local data=$1 i
	shift
	port_free "$PORT" && port_free $((PORT + 1)) || die "port $PORT or $((PORT + 1)) is in use; set PORT"
	"$WORK/malachi" serve --dev --data-dir "$data" --log-level warn "$@" \
		--listen "127.0.0.1:$PORT" --http "127.0.0.1:$((PORT + 1))" >"$WORK/node.log" 2>&1 &
	NODE_PID=$!
	PIDS+=("$NODE_PID")
	for ((i = 0; i < 300; i++)); do
		grep -q '^ready' "$WORK/node.log" 2>/dev/null && return
		kill -0 "$NODE_PID" 2>/dev/null || die "the node exited:"$'\n'"$(tail -20 "$WORK/node.log")"
		sleep 0.1
	done
	die "the node is not ready after 30 s"
}

# isolate_env: the bench commands must not pick up the user's saved
# contexts or MALACHI_* settings.
isolate_env() {
	local v
	for v in $(env | sed -n 's/^\(MALACHI_[A-Z_]*\)=.*/\1/p'); do
		unset "$v"
	done
	export XDG_CONFIG_HOME=$WORK/config
}
