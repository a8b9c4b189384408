// The e2e store switch (issue 24). With HANGAR_E2E_STORE=postgres every server `startServer()`
// starts keeps its state in a database of its own on the one PostgreSQL the run started
// (tests/pg/with-pg.sh, which passes its admin URL as HANGAR_E2E_PG_URL; `make test-postgres`).
// A server's database is made fresh for a data dir the harness owns and dropped when that server
// stops; a caller's data dir (a restart on the same dir) keeps one database across its servers,
// dropped with the whole PostgreSQL at the end of the run.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);

export const onPostgres = process.env.HANGAR_E2E_STORE === 'postgres';

function adminUrl() {
  const url = process.env.HANGAR_E2E_PG_URL;
  if (!url) {
    throw new Error('HANGAR_E2E_STORE=postgres needs HANGAR_E2E_PG_URL: run through tests/pg/with-pg.sh ' +
      '(make test-postgres, or `../pg/with-pg.sh node --test <file>` in tests/e2e)');
  }
  return url;
}

/** Runs one statement with psql on `url`; resolves to its unaligned, tuples-only output. */
export async function psql(url, sql) {
  const { stdout } = await execFileP('psql', ['-X', '-q', '-t', '-A', '-v', 'ON_ERROR_STOP=1', '-d', url, '-c', sql], {
    env: { ...process.env, PGCONNECT_TIMEOUT: '5' },
    timeout: 30_000,
  });
  return stdout.trim();
}

/**
 * A database for the server using `dataDir`: {url, drop()}. `fresh` (the harness owns the dir):
 * created now, dropped by drop(). Otherwise the same database for every server on that dir.
 */
export async function databaseFor(dataDir, fresh) {
  const admin = adminUrl();
  const name = 'e2e_' + createHash('sha256').update(dataDir).digest('hex').slice(0, 24);
  const exists = (await psql(admin, `SELECT 1 FROM pg_database WHERE datname = '${name}'`)) === '1';
  if (exists && fresh) await psql(admin, `DROP DATABASE ${name} WITH (FORCE)`);
  if (!exists || fresh) await psql(admin, `CREATE DATABASE ${name}`);
  const url = new URL(admin);
  url.pathname = '/' + name;
  return {
    url: url.toString(),
    async drop() {
      if (fresh) await psql(admin, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}

/**
 * The files holding what `server` keeps at rest, to search for secrets: its SQLite file and WAL,
 * or on PostgreSQL a plain dump of its database (written into its data dir).
 */
export async function storeFilesAtRest(server) {
  if (!server.env.HANGAR_STORE_URL?.startsWith('postgresql:')) {
    return ['hangar.db', 'hangar.db-wal'].map((f) => join(server.dataDir, f)).filter(existsSync);
  }
  const file = join(server.dataDir, 'store.sql');
  await execFileP('pg_dump', ['--data-only', '-f', file, '-d', server.env.HANGAR_STORE_URL], { timeout: 60_000 });
  return [file];
}

/** Stops the run's PostgreSQL at once (as a crash), or starts it again on its port. */
export async function pgOutage(action) {
  const dir = process.env.HANGAR_E2E_PG_DIR;
  if (!dir) throw new Error('HANGAR_E2E_PG_DIR is unset: run through tests/pg/with-pg.sh');
  const script = new URL('../../pg/pgtemp.sh', import.meta.url).pathname;
  await execFileP(script, [action === 'stop' ? 'stop' : 'restart', dir], { timeout: 60_000 });
}
