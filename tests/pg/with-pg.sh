#!/bin/sh
# Runs a command beside one throw-away PostgreSQL (pgtemp.sh), started once for it and stopped and
# removed when it ends, whatever its outcome (a failure, Ctrl-C, SIGTERM):
#   with-pg.sh CMD ARGS...
# CMD sees HANGAR_E2E_STORE=postgres, HANGAR_E2E_PG_URL (the server's admin URL) and
# HANGAR_E2E_PG_DIR (for `pgtemp.sh stop|restart`, an outage); the e2e
# harness (tests/e2e/lib/pg.mjs) then gives every hangar it starts a database of its own there.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/hangar-pg-XXXXXX")
chmod 711 "$dir" # the server's own user (postgres, when run as root) must pass through
cleanup() {
  "$here/pgtemp.sh" stop "$dir/pg" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
url=$("$here/pgtemp.sh" start "$dir/pg" "$port")
set +e
HANGAR_E2E_STORE=postgres HANGAR_E2E_PG_URL=$url HANGAR_E2E_PG_DIR=$dir/pg "$@"
status=$?
set -e
exit $status
