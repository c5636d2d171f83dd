#!/usr/bin/env bash
# Starts or stops a PgBouncer of its own (Debian's package) in transaction mode, in front of
# the PostgreSQL server on 127.0.0.1:5432, for CI's second pass of the PostgreSQL tests.
#
#   .ci/pgbouncer.sh start DIR   # writes DIR/pgbouncer.ini, starts it on a spare port, prints the port
#   .ci/pgbouncer.sh stop DIR    # stops the one started with DIR
#
# It never uses the system's pgbouncer service or its configuration. Installs the package when
# it is missing. Runs as the postgres user (PgBouncer refuses to run as root).
set -euo pipefail

command=${1:?usage: $0 start|stop DIR}
dir=${2:?usage: $0 start|stop DIR}

log() { printf '==> %s\n' "$*" >&2; }

binary() {
  command -v pgbouncer 2>/dev/null || { [ -x /usr/sbin/pgbouncer ] && echo /usr/sbin/pgbouncer; } || true
}

port_is_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
  if [ -z "$(binary)" ]; then
    log "installing PgBouncer from the distribution's packages"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  fi
  local port=""
  for candidate in $(seq 6433 6532); do
    if port_is_free "$candidate"; then port=$candidate; break; fi
  done
  [ -n "$port" ] || { log "no free port in 6433-6532 for PgBouncer"; exit 1; }

  mkdir -p "$dir"
  # Trust, as the server itself trusts local TCP connections in CI; the auth file lists the
  # one user the tests connect as.
  echo '"postgres" ""' >"$dir/userlist.txt"
  cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
; tests run in parallel, each storage with a few connections: many clients, few servers
max_client_conn = 2000
default_pool_size = 40
; no ignore_startup_parameters: storages with ?pgbouncer=true send no startup settings
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  chown -R postgres "$dir"
  # Every client is a file descriptor: the default limit of 1024 is too few.
  (ulimit -n 8192 2>/dev/null || true; runuser -u postgres -- "$(binary)" -d "$dir/pgbouncer.ini")
  for _ in $(seq 1 50); do
    if psql "postgres://postgres@127.0.0.1:$port/postgres" -w -Atc 'select 1' >/dev/null 2>&1; then
      log "PgBouncer $("$(binary)" --version | head -n 1 | awk '{print $2}') in transaction mode on 127.0.0.1:$port"
      echo "$port"
      return
    fi
    sleep 0.2
  done
  log "PgBouncer did not accept connections on port $port:"
  cat "$dir/pgbouncer.log" >&2 || true
  exit 1
}

stop() {
  if [ -f "$dir/pgbouncer.pid" ]; then
    kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true
  fi
}

case "$command" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
