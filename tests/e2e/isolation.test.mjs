// Isolation between instances, attacked from inside instance A the way a tenant would: with
// process.exec, playwright.execute and an extension's page. Each attack must fail, while A still
// reaches what the operator allowed (a test site on an allowed host port). Two browsers alive.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { preparedNetworksOf, startServer, startTestPages, waitFor } from './lib/server.mjs';
import { slow } from './lib/tier.mjs';

const PIDS_MAX = 1024;
const DISK_QUOTA_MB = 96;
// The instance folder is its own size-capped file system only when the server may mount (root).
const asRoot = process.getuid?.() === 0;
let server;
let pages;
let outside; // a host loopback server on a port the operator did NOT allow
let a;
let b;
let plain; // a server without prepared networks: its instances link their own namespace out
let c; // an instance of it

const unb64 = (s) => Buffer.from(s ?? '', 'base64').toString();

async function sh(session, script, timeout_sec = 30) {
  const r = await (session === c ? plain : server).client.browsers.process.exec(session.session_id, {
    command: 'bash',
    args: ['-c', script],
    timeout_sec,
  });
  return { code: r.exit_code, out: unb64(r.stdout_b64), err: unb64(r.stderr_b64) };
}

before(async () => {
  server = await startServer({
    env: { HANGAR_SANDBOX_PIDS_MAX: String(PIDS_MAX), HANGAR_SANDBOX_DISK_QUOTA_MB: String(DISK_QUOTA_MB) },
  });
  pages = await startTestPages();
  outside = http.createServer((req, res) => res.end('host-only'));
  await new Promise((r) => outside.listen(0, '127.0.0.1', r));
  // A and B start in prepared networks (host/README.md, "Prepared networks"); C, on a server
  // without them, in one it linked out itself. The network attacks run from A and C.
  await waitFor(() => preparedNetworksOf(server.dataDir).length === 2, { timeoutMs: 15_000, what: 'two prepared networks' });
  a = await server.client.browsers.create({ headless: true });
  b = await server.client.browsers.create({ headless: true });
  plain = await startServer({ env: { HANGAR_SANDBOX_PREPARED: '0' } });
  c = await plain.client.browsers.create({ headless: true });
});

after(async () => {
  for (const s of [a, b]) if (s) await server.client.browsers.deleteByID(s.session_id).catch(() => {});
  if (c) await plain.client.browsers.deleteByID(c.session_id).catch(() => {});
  outside?.close();
  await pages?.close();
  await server?.stop();
  await plain?.stop();
});

// The command line of an instance's pasta: its pid file names where it was started.
const pastaOf = (srv, session) => {
  const [, pasta] = readFileSync(join(srv.dataDir, 'instances', `${session.session_id}.pids`), 'utf8').split(' ').map(Number);
  return readFileSync(`/proc/${pasta}/cmdline`, 'utf8').replace(/\0/g, ' ');
};

describe('filesystem', () => {
  test('the data dir, the host home folders and /var are not there', async () => {
    const r = await sh(a, `for p in ${server.dataDir} /root /srv /opt /var/lib /var/log /mnt /media; do ` +
      `ls -d "$p" >/dev/null 2>&1 && echo "SEEN $p"; done; ls /home; ls /var; echo done`);
    assert.match(r.out, /done/);
    assert.doesNotMatch(r.out, /SEEN/, r.out);
    assert.equal(r.out.split('\n')[0], 'kernel', 'only /home/kernel exists under /home');
    assert.doesNotMatch(r.out, /\blib\b|\blog\b|\bcache\b/, 'no host /var contents');
  });

  test("B's files are unreachable, and writes outside the instance's folders fail", async () => {
    await sh(b, 'echo secret-of-b > /home/kernel/b.txt');
    const r = await sh(a, 'cat /home/kernel/b.txt 2>&1; ls /run/hangar; find / -name b.txt -not -path "/proc/*" 2>/dev/null; ' +
      'for f in /usr/x /etc/x /x /bin/x /lib/x; do touch $f 2>/dev/null && echo "WROTE $f"; done; ' +
      'touch /home/kernel/ok /tmp/ok && echo own-folders-writable');
    assert.doesNotMatch(r.out, /secret-of-b/);
    assert.doesNotMatch(r.out, /WROTE/, r.out);
    assert.match(r.out, /own-folders-writable/);
  });

  test("the instance folder's host path is not in its mount table", { skip: !asRoot && 'needs root' }, async () => {
    const r = await sh(a, 'cat /proc/self/mountinfo');
    assert.match(r.out, / \/home\/kernel /);
    assert.ok(!r.out.includes(server.dataDir), r.out);
    assert.doesNotMatch(r.out, /instances/, r.out);
  });

  test('filling the disk stops at the quota: 507 for an upload, nothing half-written, B unaffected',
    { skip: !asRoot && 'needs root' }, async () => {
      const fill = await sh(a, `df -m --output=size /home/kernel | tail -1; ` +
        `dd if=/dev/zero of=/home/kernel/fill bs=1M count=${DISK_QUOTA_MB * 2} 2>&1; echo "dd=$?"`, 60);
      assert.ok(Number(fill.out.split('\n')[0]) <= DISK_QUOTA_MB, fill.out);
      assert.match(fill.out, /No space left on device/);
      assert.match(fill.out, /dd=1/);

      const upload = await server.client.browsers.fs
        .writeFile(a.session_id, Buffer.alloc(4 << 20, 7), { path: '/home/kernel/upload.bin' })
        .catch((e) => e);
      assert.equal(upload.status, 507, String(upload));
      assert.equal(upload.error?.code, 'insufficient_storage');
      const left = await sh(a, 'ls -a /home/kernel');
      assert.doesNotMatch(left.out, /upload\.bin/, 'no partial file, no temp file');

      const other = await sh(b, 'dd if=/dev/zero of=/home/kernel/ten bs=1M count=10 2>&1; echo "dd=$?"; rm -f /home/kernel/ten');
      assert.match(other.out, /dd=0/);

      await sh(a, 'rm -f /home/kernel/fill');
      await server.client.browsers.fs.writeFile(a.session_id, Buffer.from('fits'), { path: '/home/kernel/upload.bin' });
      assert.equal((await sh(a, 'cat /home/kernel/upload.bin')).out, 'fits');
      assert.equal((await server.client.browsers.retrieve(a.session_id)).session_id, a.session_id);
    });

  test('the shadow file and other host secrets are not bound', async () => {
    const r = await sh(a, 'ls /etc/shadow /etc/ssh /etc/sudoers 2>&1; echo done');
    assert.match(r.out + r.err, /No such file/);
  });
});

describe('processes', () => {
  test("A does not see B's processes", async () => {
    await server.client.browsers.process.spawn(b.session_id, { command: 'sleep', args: ['987.25'] });
    const r = await sh(a, "pgrep -af 'sleep 98[7].25'; ps -eo args");
    assert.doesNotMatch(r.out, /987\.25/);
  });

  test('no capabilities, seccomp on, no new namespaces, no ptrace', async () => {
    const r = await sh(a, `grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status; ` +
      `unshare -U true 2>/dev/null && echo UNSHARED; unshare -n true 2>/dev/null && echo UNSHARED-NET; ` +
      `python3 -c '
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    time.sleep(5); os._exit(0)
rc = libc.ptrace(16, pid, 0, 0)
print("ptrace", rc, ctypes.get_errno())
os.kill(pid, 9)
'`);
    assert.match(r.out, /CapEff:\s+0000000000000000/);
    assert.match(r.out, /Seccomp:\s+2/);
    assert.doesNotMatch(r.out, /UNSHARED/);
    assert.match(r.out, /ptrace -1 1\b/, 'PTRACE_ATTACH fails with EPERM');
  });
});

describe('network', () => {
  test('A started in a prepared network, C in one its start linked out', () => {
    assert.match(pastaOf(server, a), new RegExp(`${server.dataDir}/networks/`));
    assert.match(pastaOf(plain, c), new RegExp(`${plain.dataDir}/instances/${c.session_id}/`));
  });

  for (const who of ['A', 'C']) {
    const it = () => (who === 'A' ? a : c);
    const srv = () => (who === 'A' ? server : plain);
    test(`${who}: the allowed test site is reachable from a process and from the browser`, async () => {
      const r = await sh(it(), `curl -s -m5 ${pages.url}`);
      assert.match(r.out, /Hangar test page/);
      const pw = await srv().client.browsers.playwright.execute(it().session_id, {
        code: `await page.goto(${JSON.stringify(pages.url)}); return await page.title();`,
      });
      assert.equal(pw.success, true, JSON.stringify(pw));
      assert.equal(pw.result, 'Hangar test page');
    });

    test(`${who}: the Hangar API, other host loopback ports, the cloud metadata address and private ranges are unreachable`, async () => {
      const outsidePort = outside.address().port;
      const targets = [
        `http://127.0.0.1:${srv().port}/browsers`,
        `http://127.0.0.1:${outsidePort}/`,
        'http://169.254.169.254/latest/meta-data/',
        'http://10.0.0.1/',
        'http://192.168.1.1/',
        'http://172.16.0.1/',
        'http://192.0.2.1:22/',
      ];
      const r = await sh(it(), targets.map((u) => `curl -s -m3 -o /dev/null -w '%{http_code} ${u}\\n' ${u}`).join('; '), 60);
      for (const u of targets) assert.match(r.out, new RegExp(`^000 ${u.replace(/[.?/]/g, '\\$&')}$`, 'm'), `${u} answered: ${r.out}`);
      // The browser is refused the same way: its forwarder cannot connect, and says so as
      // Kernel's egress proxy would.
      const pw = await srv().client.browsers.playwright.execute(it().session_id, {
        code: `try { const r = await page.goto('http://127.0.0.1:${srv().port}/browsers', {timeout: 5000}); return 'HTTP ' + r.status() + ' ' + r.headers()['x-kernel-proxy-error']; } catch (e) { return String(e.message).slice(0, 80); }`,
      });
      assert.match(pw.result, /^HTTP 502 upstream_connect_failed$|ERR_CONNECTION_REFUSED|ERR_CONNECTION_RESET/);
    });

    test(`${who}: the host network configuration stays outside`, async () => {
      const r = await sh(it(), 'ip -br -4 addr; cat /etc/resolv.conf /etc/hosts');
      assert.match(r.out, /192\.0\.2\.2\/30/);
      assert.match(r.out, /nameserver 192\.0\.2\.1/);
      assert.doesNotMatch(r.out, /\b10\.\d+\.\d+\.\d+\/\d+|\b172\.(1[6-9]|2\d|3[01])\.\d+\.\d+\/\d+/, 'no host interface address');
    });
  }

  test("B's DevTools endpoint cannot be dialled from A", async () => {
    const port = (await sh(b, 'cat "$(find /home/kernel /tmp -name DevToolsActivePort 2>/dev/null | head -1)" | head -1')).out.trim();
    assert.match(port, /^\d+$/, 'B has a DevTools port');
    // B opens a page whose URL only B knows, so a listing that shows it came from B.
    await server.client.browsers.playwright.execute(b.session_id, {
      code: `await page.goto(${JSON.stringify(pages.url + 'page?title=only-b')}); return 1;`,
    });
    const r = await sh(a, `curl -s -m3 http://127.0.0.1:${port}/json/list; echo rc=$?`);
    assert.doesNotMatch(r.out, /only-b/);
  });

  test('no address appears on the link after start: Chromium would fail navigations with ERR_NETWORK_CHANGED', async () => {
    // The kernel's IPv6 link-local address finishes duplicate detection about a second after
    // the link comes up; it must not be there at all, tentative or not, on a fresh instance.
    const fresh = await server.client.browsers.create({ headless: true });
    try {
      const r = await sh(fresh, 'cat /proc/net/if_inet6; ip -o link show');
      assert.equal(r.code, 0, r.err);
      assert.match(r.out, /\beth0\b/, 'the link is there');
      assert.doesNotMatch(r.out, /^fe80\S* .*eth0$/m, 'no IPv6 link-local address on the link');
    } finally {
      await server.client.browsers.deleteByID(fresh.session_id);
    }
  });
});

describe('fork bomb', () => {
  // Last in the file: the bomb leaves A at its task limit for a few seconds, and the tests above
  // need A calm. While it lasts, Chromium still opens connections through the agent's proxy
  // forwarder, which then has no thread to serve them with; that must cost the connection only,
  // never the agent (it once did: an uncaught std::system_error ended A's session).
  test('a fork bomb stops at the instance task limit and the server keeps serving', slow, async () => {
    const r = await sh(a, `python3 -c '
import os, time
n = 0
try:
    for i in range(20000):
        pid = os.fork()
        if pid == 0:
            time.sleep(4); os._exit(0)
        n += 1
except OSError as e:
    print("stopped", n, e.errno)
'`, 60);
    const m = r.out.match(/stopped (\d+) (\d+)/);
    assert.ok(m, `the bomb was not stopped: ${r.out} ${r.err}`);
    assert.ok(Number(m[1]) < PIDS_MAX, `forked ${m[1]} with a limit of ${PIDS_MAX}`);
    assert.equal(Number(m[2]), 11, 'EAGAIN');
    const list = await server.client.browsers.list();
    assert.ok(list.items?.length ?? [...(await list)].length);
    // B is untouched, and A recovers once its forks end.
    assert.equal((await sh(b, 'echo alive')).out.trim(), 'alive');
    const count = async () => Number((await sh(a, 'ps -e --no-headers | wc -l').catch(() => ({ out: 'NaN' }))).out);
    await waitFor(async () => (await count()) < 100, {
      timeoutMs: 20_000,
      what: 'A to run processes again',
    });
  });
});
