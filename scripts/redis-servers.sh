# redis-servers.sh -- sourced by scripts/redis-compare and scripts/redis-batch-runs: a fresh
# redis-server (no persistence) and a delayqd over it, on free loopback ports, killed when the
# script exits. The script sets TMP (a scratch directory, removed at exit) before sourcing.
# servers_start sets RP (Redis's port) and DP (delayqd's); PIDS holds Redis's pid, then delayqd's.
PIDS=()
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done; return 1; }
servers_stop() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; PIDS=(); }
# servers_start [DELAYQD]: stops the last ones, starts a fresh Redis, and DELAYQD over it if given
servers_start() {
    servers_stop
    RP=$(free_port); DP=$(free_port)
    redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >"$TMP/redis.log" 2>&1 &
    PIDS+=($!); wait_port "$RP"
    if [ -n "${1:-}" ]; then
        rm -rf "$TMP/data"
        "$1" --port "$DP" --http-port 0 --data-dir "$TMP/data" --store "redis://127.0.0.1:$RP?prefix=b" >"$TMP/dq.log" 2>&1 &
        PIDS+=($!); wait_port "$DP"
    fi
}
trap 'servers_stop; rm -rf "$TMP"' EXIT
