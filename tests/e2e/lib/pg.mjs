// The e2e store switch (issue 24). With HANGAR_E2E_STORE=postgres every server `startServer()`
// starts keeps its state in a database of its own on the one PostgreSQL the run started
// (tests/pg/with-pg.sh, which passes its admin URL as HANGAR_E2E_PG_URL; `make test-postgres`).
// A server's database is made fresh for a data dir the harness owns and dropped when that server
// stops; a caller's data dir (a restart on the same dir) keeps one database across its servers,
// dropped with the whole PostgreSQL at the end of the run.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
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

async function psql(url, sql) {
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

/** pg_dump of the database `server` runs on, as plain SQL in `file` (what lies at rest there). */
export async function dumpDatabase(server, file) {
  await execFileP('pg_dump', ['--data-only', '-f', file, '-d', server.env.HANGAR_STORE_URL], { timeout: 60_000 });
  return file;
}
