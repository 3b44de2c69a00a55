# Shared helpers for relay's shell tools. Source it; it defines functions only.

relay_root() { cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd; }
relay_cache() { echo "${RELAY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/relay}"; }

die() { echo "$(basename "$0"): $*" >&2; exit 1; }
log() { echo "$(basename "$0"): $*" >&2; }

# free_port: prints a TCP port on 127.0.0.1 that nobody listens on now. The
# kernel picks it (bind to port 0); there is a small window before our server
# binds it, which is acceptable for dev and test stacks.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_port HOST PORT SECONDS: waits until something accepts on HOST:PORT.
wait_port() {
  local host=$1 port=$2 deadline=$((SECONDS + $3))
  while [ $SECONDS -lt $deadline ]; do
    (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

# running PID: true while PID is a process that has not exited. A zombie
# (exited, not yet reaped: the parent of a daemonized server is often a PID 1
# that never reaps, as in many containers) counts as exited.
running() {
  kill -0 "$1" 2>/dev/null || return 1
  local state
  state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ "$state" != Z ]
}

# pid_alive PIDFILE: true when the pid in PIDFILE is a live process.
pid_alive() { [ -f "$1" ] && running "$(cat "$1")"; }

# stop_pid PIDFILE SECONDS: SIGTERM, wait, then SIGKILL the process group.
stop_pid() {
  local pidfile=$1 deadline=$((SECONDS + $2)) pid
  pid_alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null || true
  while running "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
  running "$pid" && kill -KILL -- "-$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}
