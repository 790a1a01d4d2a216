# Sourced by bin/serve and bin/stop: the one running bin/serve of this checkout, in .data/serve.pid as
# "<bin/serve's pid> <host:port> [<gunicorn's pid>]" (an older bin/serve wrote its pid alone).
PIDFILE=.data/serve.pid

# Is $1 a live bin/serve? A pid in a stale file may belong to any process by now: only a positive number
# whose command line runs bin/serve counts (`0` or `-1` would have had `kill` signal whole process groups).
is_serve() {
  [[ "${1:-}" =~ ^[1-9][0-9]{0,9}$ ]] && [[ "$(ps -o args= -p "$1" 2>/dev/null)" == *bin/serve* ]]
}

# Is $1 a live gunicorn serving Memories (what a bin/serve that was killed with SIGKILL leaves running)?
is_gunicorn() {
  [[ "${1:-}" =~ ^[1-9][0-9]{0,9}$ ]] && [[ "$(ps -o args= -p "$1" 2>/dev/null)" == *"gunicorn config.asgi"* ]]
}

# The fields of the pid file, in SERVE_PID, SERVE_WHERE and SERVE_GUNICORN (empty when absent or unreadable).
read_pidfile() {
  SERVE_PID="" SERVE_WHERE="" SERVE_GUNICORN=""
  if [ -f "$PIDFILE" ]; then
    read -r SERVE_PID SERVE_WHERE SERVE_GUNICORN _ < "$PIDFILE" || true
  fi
}

# Stop $1 with SIGTERM and wait up to 30 s for it to end.
stop_and_wait() {
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 1 300); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
}
