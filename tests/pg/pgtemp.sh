#!/bin/sh
# A throw-away PostgreSQL server for tests (Debian's `postgresql` package), run as an unprivileged
# user in a folder of its own:
#   pgtemp.sh start DIR PORT   initdb + start on 127.0.0.1:PORT; prints the store URL
#   pgtemp.sh stop DIR         immediate stop, as a crash (the folder is the caller's to remove)
#   pgtemp.sh restart DIR      start a stopped one again on its port (an outage's end)
# As root the server runs as the `postgres` user (initdb refuses root); DIR's parents must let it
# through. Password auth (scram) so tests can check bad credentials.
set -eu
cmd=$1
dir=$2
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$bindir" ] || { echo "pgtemp: no /usr/lib/postgresql/*/bin (apt-get install postgresql)" >&2; exit 2; }
as_db_user() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
run_server() {
  as_db_user "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $1 -k $dir -c fsync=off -c max_connections=100" start >/dev/null ||
    { cat "$dir/server.log" >&2; exit 1; }
}
case $cmd in
start)
  port=$3
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  as_db_user sh -c "umask 077; printf '%s\n' hangar-test-pw > '$dir/pw'; printf '%s\n' $port > '$dir/port'"
  as_db_user "$bindir/initdb" -D "$dir/data" -U hangar --pwfile="$dir/pw" --auth=scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
  run_server "$port"
  echo "postgresql://hangar:hangar-test-pw@127.0.0.1:$port/postgres"
  ;;
restart)
  run_server "$(cat "$dir/port")"
  ;;
stop)
  as_db_user "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
  ;;
*)
  echo "usage: pgtemp.sh start DIR PORT | stop DIR | restart DIR" >&2
  exit 64
  ;;
esac
