# Sourced by bin/serve and bin/stop (after bin/_bootstrap.sh, which cd's to the checkout, $ROOT).
# One bin/serve per checkout: it holds an exclusive lock on .data/serve.lock (flock) for as long as it or the
# gunicorn it started runs (gunicorn inherits the open file), and .data/serve.pid says who it is:
# "<bin/serve's pid> <host:port> [<gunicorn's pid>]" (an older bin/serve wrote its pid alone).
PIDFILE=.data/serve.pid
LOCKFILE=.data/serve.lock
HERE="$(pwd -P)"   # the checkout as /proc/<pid>/cwd names it (symbolic links resolved)

# Is $1 a live process of this checkout whose command line holds $2? A pid in a stale file may belong to any
# process by now, even another checkout's bin/serve: only a positive number, running here (its working
# folder is this checkout, where Linux tells), with that command line counts (`0` or `-1` would have had
# `kill` signal whole process groups). `ps -ww`: without it ps cuts the line at 80 columns when piped.
ours() {
  [[ "${1:-}" =~ ^[1-9][0-9]{0,9}$ ]] || return 1
  [[ "$(ps -ww -o args= -p "$1" 2>/dev/null)" == *"$2"* ]] || return 1
  if [ -d "/proc/$1" ]; then [ "$(readlink "/proc/$1/cwd" 2>/dev/null)" = "$HERE" ]; fi
}
# bin/serve runs as bash, however it was called (`bin/serve`, `./serve` in bin/, a link): `tail -f bin/serve`
# is not it.
is_serve() { ours "${1:-}" "serve" && [ "$(ps -o comm= -p "$1" 2>/dev/null)" = "bash" ]; }
# What a bin/serve that was killed (SIGKILL) leaves running.
is_gunicorn() { ours "${1:-}" "gunicorn config.asgi"; }

# Is the lock held (a bin/serve, or its gunicorn, runs)? Without flock (not on every system) a pid file
# naming a live bin/serve or gunicorn of this checkout says so.
serve_running() {
  if command -v flock >/dev/null 2>&1; then
    mkdir -p .data
    ( exec 7>>"$LOCKFILE" || exit 1; ! flock -n 7 ) 2>/dev/null
  else
    read_pidfile
    is_serve "$SERVE_PID" || is_gunicorn "$SERVE_GUNICORN"
  fi
}

# The fields of the pid file, in SERVE_PID, SERVE_WHERE and SERVE_GUNICORN (empty when absent or unreadable).
read_pidfile() {
  SERVE_PID="" SERVE_WHERE="" SERVE_GUNICORN=""
  if [ -f "$PIDFILE" ]; then
    read -r SERVE_PID SERVE_WHERE SERVE_GUNICORN _ < "$PIDFILE" || true
  fi
}

# Stop $1 with SIGTERM and wait for it to end: as long as gunicorn may drain its requests
# (GUNICORN_GRACEFUL_TIMEOUT, default 10 s) and 60 s more (a first migration). Fails if it is still there.
# Ended means the lock is free (bin/serve and its gunicorn gone), or without flock that $1 is gone or a zombie
# (its parent has not collected it yet: `kill -0` still succeeds on one).
stop_and_wait() {
  kill -TERM "$1" 2>/dev/null || return 0
  local limit=$(( (${GUNICORN_GRACEFUL_TIMEOUT:-10} + 60) * 10 ))
  for _ in $(seq 1 "$limit"); do
    if command -v flock >/dev/null 2>&1; then
      serve_running || return 0
    elif ! kill -0 "$1" 2>/dev/null || [[ "$(ps -o stat= -p "$1" 2>/dev/null)" == Z* ]]; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}
