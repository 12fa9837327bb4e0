# Shell helpers shared by the benchmark scripts (sourced, not run).
# The caller sets PIDS=() (background processes to stop on exit), WORK (a
# scratch folder), KEEP (1 keeps WORK), CMD_TIMEOUT (seconds one command
# may run) and, for install_tool, CACHE (where tools are installed), and
# traps EXIT with cleanup.

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
	# Emptied here, not by the background redirection, so that the wait
	# below never reads an earlier node's "ready".
	: >"$WORK/node.log"
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

# install_tool BIN MODULE VERSION: go install MODULE@VERSION into
# $CACHE/bin unless BIN there already reports VERSION.
install_tool() {
	local bin=$CACHE/bin/$1 module=$2 version=$3
	if [[ -x $bin ]] && "$bin" --version 2>&1 | grep -q -- "${version#v}"; then
		log "using $bin ($version)"
		return
	fi
	log "installing $module@$version into $CACHE/bin"
	mkdir -p "$CACHE/bin"
	(cd "$WORK" && GOBIN=$CACHE/bin GOFLAGS= go install "$module@$version") ||
		die "go install $module@$version failed"
}

# wait_ready PID LOG PATTERN: until LOG shows PATTERN (30 s at most).
wait_ready() {
	local pid=$1 logf=$2 pattern=$3 i
	for ((i = 0; i < 300; i++)); do
		grep -q -- "$pattern" "$logf" 2>/dev/null && return
		kill -0 "$pid" 2>/dev/null || die "server $pid exited; the end of its log:"$'\n'"$(tail -20 "$logf")"
		sleep 0.1
	done
	die "server $pid not ready after 30 s ($logf)"
}
