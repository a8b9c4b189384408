// Processes inside a browser instance through the official SDK: exec, spawn, stdout/stream, stdin,
// status, kill, PTY resize, sandbox isolation, and errors. One headless browser for most tests,
// a second one only for the isolation test (never more than 2 alive).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { BadRequestError, NotFoundError } from '@onkernel/sdk';

import { startServer } from './lib/server.mjs';

let server;
let client;
let browser;
const created = new Set();

const b64 = (s) => Buffer.from(s).toString('base64');
const unb64 = (s) => Buffer.from(s ?? '', 'base64').toString();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function create(params) {
  const b = await client.browsers.create(params);
  created.add(b.session_id);
  return b;
}

async function destroy(id) {
  try {
    await client.browsers.deleteByID(id);
  } catch (err) {
    if (!(err instanceof NotFoundError)) throw err;
  }
  created.delete(id);
}

async function rejectsWith(promise, Class, code) {
  const err = await promise.then(
    (v) => assert.fail(`expected ${Class.name}, got ${JSON.stringify(v)}`),
    (e) => e,
  );
  assert.ok(err instanceof Class, `expected ${Class.name}, got ${err?.constructor?.name}: ${err?.message}`);
  assert.equal(err.error.code, code);
  assert.equal(typeof err.error.message, 'string');
  return err;
}

/** Reads the whole stdout/stream (until the server closes it): {stdout, stderr, exit, events}. */
async function readStream(processId, { until } = {}) {
  const stream = await client.browsers.process.stdoutStream(processId, { id: browser.session_id });
  const out = { stdout: '', stderr: '', exit: undefined, events: [] };
  for await (const ev of stream) {
    out.events.push(ev);
    if (ev.event === 'exit') out.exit = ev.exit_code;
    else if (ev.stream === 'stderr') out.stderr += unb64(ev.data_b64);
    else out.stdout += unb64(ev.data_b64);
    if (until && until(out)) {
      stream.controller.abort();
      break;
    }
  }
  return out;
}

async function waitExited(processId, ms = 10_000) {
  const end = Date.now() + ms;
  for (;;) {
    const s = await client.browsers.process.status(processId, { id: browser.session_id });
    if (s.state === 'exited' || Date.now() > end) return s;
    await sleep(100);
  }
}

before(async () => {
  server = await startServer();
  client = server.client;
  browser = await create({ headless: true });
});

after(async () => {
  for (const id of [...created]) await destroy(id).catch(() => {});
  await server?.stop();
});

describe('exec', () => {
  test('echo: exit 0 and base64 stdout', async () => {
    const r = await client.browsers.process.exec(browser.session_id, { command: 'echo', args: ['hello', 'world'] });
    assert.equal(r.exit_code, 0);
    assert.equal(unb64(r.stdout_b64), 'hello world\n');
    assert.equal(r.stderr_b64, '');
    assert.equal(typeof r.duration_ms, 'number');
  });

  test('shell command line, stderr, non-zero exit, env and cwd', async () => {
    const r = await client.browsers.process.exec(browser.session_id, {
      command: 'echo "$FOO" >&2; pwd; exit 3',
      env: { FOO: 'bar' },
      cwd: '/tmp',
    });
    assert.equal(r.exit_code, 3);
    assert.equal(unb64(r.stdout_b64), '/tmp\n');
    assert.equal(unb64(r.stderr_b64), 'bar\n');
    // Defaults: the instance user's home, as that user; as_user naming that user is accepted.
    const d = await client.browsers.process.exec(browser.session_id, { command: 'pwd', as_user: 'kernel' });
    assert.equal(d.exit_code, 0);
    assert.equal(unb64(d.stdout_b64), '/home/kernel\n');
  });

  test('binary output round-trips through base64', async () => {
    const r = await client.browsers.process.exec(browser.session_id, {
      command: 'printf',
      args: ['\\000\\001\\377abc'],
    });
    assert.deepEqual([...Buffer.from(r.stdout_b64, 'base64')], [0, 1, 255, 97, 98, 99]);
  });

  test('timeout kills the whole process group', async () => {
    const t0 = Date.now();
    const r = await client.browsers.process.exec(browser.session_id, {
      command: 'sleep 30 & sleep 30; echo never',
      timeout_sec: 1,
    });
    const took = Date.now() - t0;
    assert.ok(took < 10_000, `returned after ${took} ms`);
    assert.notEqual(r.exit_code, 0);
    assert.equal(unb64(r.stdout_b64), '');
    assert.ok(r.duration_ms >= 900 && r.duration_ms < 10_000, `duration_ms ${r.duration_ms}`);
    const ps = await client.browsers.process.exec(browser.session_id, { command: 'ps -eo args' });
    assert.doesNotMatch(unb64(ps.stdout_b64), /sleep 30/);
  });
});

describe('spawn and stream', () => {
  test('output written before the reader connects is replayed, then the exit event', async () => {
    const p = await client.browsers.process.spawn(browser.session_id, {
      command: 'echo one; echo two >&2; sleep 0.5; echo three; exit 5',
    });
    assert.match(p.process_id, /^[0-9a-f-]{36}$/);
    assert.equal(typeof p.pid, 'number');
    assert.ok(!Number.isNaN(Date.parse(p.started_at)));
    await sleep(200); // "one" and "two" are out before anybody reads
    const out = await readStream(p.process_id);
    assert.equal(out.stdout, 'one\nthree\n');
    assert.equal(out.stderr, 'two\n');
    assert.equal(out.exit, 5);
    assert.deepEqual(out.events.at(-1), { event: 'exit', exit_code: 5 });
    // A reader after the exit still gets everything.
    const again = await readStream(p.process_id);
    assert.equal(again.stdout, 'one\nthree\n');
    assert.equal(again.exit, 5);
  });

  test('a process nobody reads never blocks on its output', async () => {
    const p = await client.browsers.process.spawn(browser.session_id, {
      command: 'head -c 3000000 /dev/zero; echo done',
    });
    const s = await waitExited(p.process_id);
    assert.equal(s.state, 'exited');
    assert.equal(s.exit_code, 0);
    // The buffer keeps the newest output (bounded), so the tail is still there.
    const out = await readStream(p.process_id);
    assert.ok(out.stdout.endsWith('done\n'));
    assert.ok(out.stdout.length <= 1_100_000, `buffered ${out.stdout.length} bytes`);
    assert.equal(out.exit, 0);
  });

  test('stdin round trip through cat', async () => {
    const p = await client.browsers.process.spawn(browser.session_id, { command: 'cat' });
    const w = await client.browsers.process.stdin(p.process_id, { id: browser.session_id, data_b64: b64('ping\n') });
    assert.equal(w.written_bytes, 5);
    const out = await readStream(p.process_id, { until: (o) => o.stdout.includes('ping\n') });
    assert.equal(out.stdout, 'ping\n');
    const k = await client.browsers.process.kill(p.process_id, { id: browser.session_id, signal: 'TERM' });
    assert.equal(k.ok, true);
    const s = await waitExited(p.process_id);
    assert.equal(s.state, 'exited');
    assert.equal(s.exit_code, 128 + 15);
  });

  test('status: running with real cpu and memory, then exited', async () => {
    const p = await client.browsers.process.spawn(browser.session_id, {
      command: 'i=0; while [ $i -lt 2000000 ]; do i=$((i+1)); done',
      timeout_sec: 30,
    });
    await sleep(700);
    const s = await client.browsers.process.status(p.process_id, { id: browser.session_id });
    assert.equal(s.state, 'running');
    assert.equal(s.exit_code, null);
    assert.ok(s.cpu_pct > 5, `cpu_pct ${s.cpu_pct}`);
    assert.ok(s.mem_bytes > 100_000, `mem_bytes ${s.mem_bytes}`);
    await client.browsers.process.kill(p.process_id, { id: browser.session_id, signal: 'KILL' });
    const done = await waitExited(p.process_id);
    assert.equal(done.state, 'exited');
    assert.equal(done.exit_code, 128 + 9);
    assert.ok(done.mem_bytes > 0);
  });

  test('kill with INT ends a sleeping process and the stream sees the exit', async () => {
    const p = await client.browsers.process.spawn(browser.session_id, { command: 'sleep', args: ['60'] });
    const reading = readStream(p.process_id);
    await sleep(200);
    await client.browsers.process.kill(p.process_id, { id: browser.session_id, signal: 'INT' });
    const out = await reading;
    assert.equal(out.exit, 128 + 2);
  });

  test('PTY with rows/cols, then resize', async () => {
    const p = await client.browsers.process.spawn(browser.session_id, {
      command: 'stty size; read x; stty size',
      allocate_tty: true,
      rows: 33,
      cols: 111,
    });
    await sleep(300);
    const r = await client.browsers.process.resize(p.process_id, { id: browser.session_id, rows: 44, cols: 122 });
    assert.equal(r.ok, true);
    await client.browsers.process.stdin(p.process_id, { id: browser.session_id, data_b64: b64('go\n') });
    const out = await readStream(p.process_id);
    assert.match(out.stdout, /33 111\r?\n/);
    assert.match(out.stdout, /44 122\r?\n/);
    assert.equal(out.exit, 0);
  });
});

describe('isolation', () => {
  test('processes see only their own sandbox, not the host or another instance', async () => {
    const other = await create({ headless: true });
    try {
      const marker = 'hangar-marker-' + Date.now();
      const bg = await client.browsers.process.spawn(other.session_id, { command: `exec -a ${marker} sleep 60` });
      const mine = await client.browsers.process.exec(browser.session_id, { command: 'ps -eo pid,args' });
      const text = unb64(mine.stdout_b64);
      assert.doesNotMatch(text, new RegExp(marker));
      assert.doesNotMatch(text, /hangar serve/);
      assert.doesNotMatch(text, /node --test/);
      const pids = await client.browsers.process.exec(browser.session_id, {
        command: 'ls /proc | grep -c "^[0-9]"',
      });
      assert.ok(Number(unb64(pids.stdout_b64)) < 50, `pids visible: ${unb64(pids.stdout_b64)}`);
      // Another session's process id is unknown here.
      await rejectsWith(client.browsers.process.status(bg.process_id, { id: browser.session_id }), NotFoundError, 'not_found');
      const killHost = await client.browsers.process.exec(browser.session_id, { command: `kill -0 ${process.pid}` });
      assert.notEqual(killHost.exit_code, 0);
    } finally {
      await destroy(other.session_id);
    }
  });
});

describe('errors', () => {
  test('unknown session: 404', async () => {
    await rejectsWith(client.browsers.process.exec('nope-nope', { command: 'true' }), NotFoundError, 'not_found');
  });

  test('unknown process: 404', async () => {
    const id = '00000000-0000-4000-8000-000000000000';
    const sid = browser.session_id;
    await rejectsWith(client.browsers.process.status(id, { id: sid }), NotFoundError, 'not_found');
    await rejectsWith(client.browsers.process.kill(id, { id: sid, signal: 'KILL' }), NotFoundError, 'not_found');
    await rejectsWith(client.browsers.process.stdin(id, { id: sid, data_b64: 'AA==' }), NotFoundError, 'not_found');
    await rejectsWith(client.browsers.process.stdoutStream(id, { id: sid }), NotFoundError, 'not_found');
  });

  test('bad input: 400 naming the field', async () => {
    const sid = browser.session_id;
    const bad = async (promise, field) => {
      const err = await rejectsWith(promise, BadRequestError, 'bad_request');
      assert.ok(
        err.error.details?.some((d) => d.message.startsWith(field)),
        `details name ${field}: ${JSON.stringify(err.error)}`,
      );
    };
    await bad(client.browsers.process.exec(sid, {}), 'command');
    await bad(client.browsers.process.exec(sid, { command: 42 }), 'command');
    await bad(client.browsers.process.exec(sid, { command: 'ls', args: 'x' }), 'args');
    await bad(client.browsers.process.exec(sid, { command: 'ls', cwd: 'relative' }), 'cwd');
    await bad(client.browsers.process.exec(sid, { command: 'ls', timeout_sec: -1 }), 'timeout_sec');
    await bad(client.browsers.process.exec(sid, { command: 'ls', env: { A: 1 } }), 'env');
    await bad(client.browsers.process.exec(sid, { command: 'ls', as_root: true }), 'as_root');
    await bad(client.browsers.process.exec(sid, { command: 'ls', as_user: 'root' }), 'as_user');
    await bad(client.browsers.process.exec(sid, { command: '/no/such/binary', args: [] }), 'command');
    await bad(client.browsers.process.spawn(sid, { command: 'ls', rows: 0, allocate_tty: true }), 'rows');
    const p = await client.browsers.process.spawn(sid, { command: 'cat' });
    try {
      await bad(client.browsers.process.kill(p.process_id, { id: sid, signal: 'BOGUS' }), 'signal');
      await bad(client.browsers.process.stdin(p.process_id, { id: sid, data_b64: '!!!' }), 'data_b64');
      await bad(client.browsers.process.resize(p.process_id, { id: sid, rows: 10, cols: 10 }), 'process_id');
      await bad(client.browsers.process.resize(p.process_id, { id: sid, rows: 10 }), 'cols');
    } finally {
      await client.browsers.process.kill(p.process_id, { id: sid, signal: 'KILL' });
    }
  });
});
