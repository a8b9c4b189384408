// Real proxy servers for the proxies tests and bench, started from Debian's packages with
// configurations written here: tinyproxy (HTTP, Basic auth), dante's sockd (SOCKS5) and stunnel4
// (TLS in front of tinyproxy, for protocol "https"). Each listens on a port instances may reach
// (ALLOWED_PORTS), so inside a sandbox it is 127.0.0.1:<port>.
import { spawn, execFileSync } from 'node:child_process';
import { writeFileSync, readFileSync, existsSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import http from 'node:http';
import net from 'node:net';
import { createHash } from 'node:crypto';

import { listenAllowed } from './server.mjs';

/** A free port in the allowed range (listened on once, then closed). */
export async function allowedPort() {
  const srv = net.createServer();
  const port = await listenAllowed(srv);
  await new Promise((r) => srv.close(r));
  return port;
}

async function waitForPort(port, child, name, timeoutMs = 10_000) {
  const t0 = Date.now();
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${name} exited with ${child.exitCode}`);
    const ok = await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() - t0 > timeoutMs) throw new Error(`${name} did not listen on ${port}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function own(child, name, port) {
  let output = '';
  child.stdout?.on('data', (d) => (output += d));
  child.stderr?.on('data', (d) => (output += d));
  return {
    port,
    pid: child.pid,
    output: () => output,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 3000);
      await gone;
      clearTimeout(t);
    },
    name,
  };
}

const GIF = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64');

/**
 * The origin: answers every request (origin-form, or absolute-form as a proxy's upstream) with a
 * page titled after its path (with `?subs=N`, N images from /sub/), and CONNECT by connecting to itself. `/ip` answers a fixed exit
 * address as JSON, like a what-is-my-ip service. `hits` records {url, host, headers}.
 */
export async function startOrigin(exitIp = '203.0.113.9') {
  const hits = [];
  const srv = http.createServer((req, res) => {
    const url = new URL(req.url, `http://${req.headers.host || 'x'}`);
    hits.push({ url: req.url, host: req.headers.host, headers: req.headers });
    if (url.pathname === '/ip') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ip: exitIp }));
      return;
    }
    if (url.pathname.startsWith('/sub/')) {
      res.writeHead(200, { 'content-type': 'image/gif', 'cache-control': 'no-store' });
      res.end(GIF);
      return;
    }
    const title = `origin ${url.hostname}${url.pathname}`;
    const subs = Number(url.searchParams.get('subs') || 0);
    const imgs = Array.from({ length: subs }, (_, i) => `<img src="/sub/${i}.gif?p=${encodeURIComponent(url.pathname)}">`).join('');
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(`<!doctype html><html><head><title>${title}</title></head><body>ok${imgs}</body></html>`);
  });
  // A WebSocket upgrade is recorded like any request (`upgrade: true`), answered by hand
  // (RFC 6455: the accept key and one text frame, "ok") and closed.
  srv.on('upgrade', (req, socket) => {
    hits.push({ url: req.url, host: req.headers.host, headers: req.headers, upgrade: true });
    const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
    socket.on('error', () => {});
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
    socket.write(Buffer.from([0x81, 2, 0x6f, 0x6b]));
    setTimeout(() => socket.destroy(), 1000);
  });
  srv.on('connect', (req, socket, head) => {
    const upstream = net.connect(srv.address().port, '127.0.0.1', () => {
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length) upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    upstream.on('error', () => socket.destroy());
    socket.on('error', () => upstream.destroy());
  });
  const port = await listenAllowed(srv);
  return {
    port,
    hits,
    close: () =>
      new Promise((r) => {
        srv.closeAllConnections?.();
        srv.close(() => r());
      }),
  };
}

/**
 * tinyproxy, with Basic auth when `user` is given. Host names under `.hangar.test` resolve nowhere: tinyproxy hands
 * them to the origin as its upstream, so a page at http://<x>.hangar.test:<origin port>/ loads only
 * through this proxy.
 */
export async function startTinyproxy(dir, { user, password, originPort }) {
  const port = await allowedPort();
  const conf = join(dir, `tinyproxy-${port}.conf`);
  writeFileSync(
    conf,
    [
      `Port ${port}`,
      'Listen 127.0.0.1',
      'Timeout 30',
      'MaxClients 100',
      'LogLevel Info',
      `LogFile "${join(dir, `tinyproxy-${port}.log`)}"`,
      ...(user ? [`BasicAuth ${user} ${password}`] : []),
      'DisableViaHeader Yes',
      `Upstream http 127.0.0.1:${originPort} ".hangar.test"`,
      '',
    ].join('\n'),
  );
  const child = spawn('tinyproxy', ['-d', '-c', conf], { stdio: ['ignore', 'pipe', 'pipe'] });
  await waitForPort(port, child, 'tinyproxy');
  return { ...own(child, 'tinyproxy', port), log: () => readFileSync(join(dir, `tinyproxy-${port}.log`), 'utf8') };
}

/** dante's sockd as a SOCKS5 proxy without authentication; its log names every connection. */
export async function startSocks(dir) {
  const port = await allowedPort();
  const conf = join(dir, `sockd-${port}.conf`);
  const log = join(dir, `sockd-${port}.log`);
  writeFileSync(
    conf,
    [
      `logoutput: ${log}`,
      `internal: 127.0.0.1 port = ${port}`,
      'external: 127.0.0.1',
      'clientmethod: none',
      'socksmethod: none',
      'client pass {',
      '  from: 0.0.0.0/0 to: 0.0.0.0/0',
      '  log: connect error',
      '}',
      'socks pass {',
      '  from: 0.0.0.0/0 to: 0.0.0.0/0',
      '  command: connect',
      '  log: connect error',
      '}',
      '',
    ].join('\n'),
  );
  const child = spawn('/usr/sbin/danted', ['-f', conf, '-p', join(dir, `sockd-${port}.pid`), '-N', '1'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  await waitForPort(port, child, 'sockd');
  return { ...own(child, 'sockd', port), log: () => (existsSync(log) ? readFileSync(log, 'utf8') : '') };
}

/** A self-signed certificate for 127.0.0.1: {cert, key} paths and the PEM. */
export function selfSignedCert(dir) {
  const cert = join(dir, 'proxy-cert.pem');
  const key = join(dir, 'proxy-key.pem');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
    '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert,
  ], { stdio: 'ignore' });
  chmodSync(key, 0o600);
  return { cert, key, pem: readFileSync(cert, 'utf8') };
}

/**
 * A test certificate authority and a server certificate for 127.0.0.1 it signed: {ca (PEM),
 * cert, key} (paths of the server's). What a TLS-intercepting proxy's users install.
 */
export function testCa(dir) {
  const p = (f) => join(dir, f);
  const run = (args) => execFileSync('openssl', args, { stdio: 'ignore' });
  run(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
    '-subj', '/CN=Hangar Test Intercepting CA', '-addext', 'basicConstraints=critical,CA:TRUE',
    '-addext', 'keyUsage=critical,keyCertSign,cRLSign', '-keyout', p('ca-key.pem'), '-out', p('ca.pem')]);
  run(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', '/CN=127.0.0.1',
    '-keyout', p('site-key.pem'), '-out', p('site.csr')]);
  writeFileSync(p('site.ext'), 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  run(['x509', '-req', '-in', p('site.csr'), '-CA', p('ca.pem'), '-CAkey', p('ca-key.pem'), '-CAcreateserial',
    '-days', '2', '-extfile', p('site.ext'), '-out', p('site-cert.pem')]);
  chmodSync(p('site-key.pem'), 0o600);
  return { ca: readFileSync(p('ca.pem'), 'utf8'), cert: p('site-cert.pem'), key: p('site-key.pem') };
}

/** stunnel4 terminating TLS on its own port and passing the stream to `targetPort`. */
export async function startStunnel(dir, { targetPort, cert, key }) {
  const port = await allowedPort();
  const conf = join(dir, `stunnel-${port}.conf`);
  writeFileSync(
    conf,
    [
      'foreground = yes',
      'pid =',
      `output = ${join(dir, `stunnel-${port}.log`)}`,
      '[proxy]',
      `accept = 127.0.0.1:${port}`,
      `connect = 127.0.0.1:${targetPort}`,
      `cert = ${cert}`,
      `key = ${key}`,
      '',
    ].join('\n'),
  );
  const child = spawn('stunnel4', [conf], { stdio: ['ignore', 'pipe', 'pipe'] });
  await waitForPort(port, child, 'stunnel');
  return own(child, 'stunnel', port);
}

/** Accepts connections and never answers: a proxy that hangs. */
export async function startBlackHole() {
  const sockets = new Set();
  const srv = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
  });
  const port = await listenAllowed(srv);
  return {
    port,
    close: () =>
      new Promise((r) => {
        for (const s of sockets) s.destroy();
        srv.close(() => r());
      }),
  };
}
