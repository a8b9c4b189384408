// WebDriver BiDi for one browser instance: a WebSocket server on a unix socket whose every
// connection is one BiDi session, translated to CDP by Google's chromium-bidi mapper running here
// in Node (not in a tab of the browser, so no extra target is visible to CDP clients).
//
//   node mapper.mjs <listen socket path> <CDP endpoint, e.g. ws+unix:/run/hangar-host/agent.sock:/cdp>
//
// Each BiDi connection opens its own CDP connection: to the Chromium DevTools socket the agent
// names in the upgrade's query (?port=&path=), else to the agent's /cdp route, which always dials
// the current Chromium. Prints "ready" on stdout once it listens. The agent stops it (its process
// group) when the instance ends. The agent may also hand it a client's own connection (below).
import './tiering.mjs';
import { createServer } from 'node:http';
import { unlinkSync } from 'node:fs';
import WebSocket, { WebSocketServer } from 'ws';
import { ZodLazy } from 'zod';
import { BidiServer } from 'chromium-bidi/out/Default/gen/src/bidiMapper/BidiMapper.js';
import { MapperCdpConnection } from 'chromium-bidi/out/Default/gen/src/cdp/CdpConnection.js';
import { BidiParser } from 'chromium-bidi/out/Default/gen/src/bidiTab/BidiParser.js';

// What each command costs the mapper (bench/bidi_alone.mjs; the CDP side is the floor):
// - chromium-bidi's parser checks every command's params with zod schemas declared as z.lazy(() =>
//   z.object(...)), and zod 3 calls that getter on every parse, so each command built its schemas
//   anew (25 µs for script.evaluate's params). The getters are pure declarations: each lazy schema
//   keeps the one it built first (what zod 4 does), 2.4 µs. The check itself is unchanged.
// - chromium-bidi makes an Error per CDP command (to reject it with if the connection closes) and
//   per error answer (its stacktrace field). Nobody reads the mapper's stacks; without them a
//   command took 0.02-0.04 ms less.
Error.stackTraceLimit = 0;
if (typeof ZodLazy.prototype._parse === 'function') {
  const parse = ZodLazy.prototype._parse;
  ZodLazy.prototype._parse = function parseOnceBuilt(input) {
    if (!this._def.builtOnce) {
      const build = this._def.getter;
      let built;
      this._def.getter = () => (built ??= build());
      this._def.builtOnce = true;
    }
    return parse.call(this, input);
  };
}

const [socketPath, cdpEndpoint] = process.argv.slice(2);
if (!socketPath || !cdpEndpoint) {
  process.stderr.write('usage: mapper.mjs <listen socket> <cdp endpoint>\n');
  process.exit(2);
}

const kindOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

// The command checks a BiDi remote end does before a command reaches a module (the mapper's own
// parser then checks each command's params).
function parseCommand(text) {
  let command;
  try {
    command = JSON.parse(text);
  } catch {
    return { error: 'the message is not JSON' };
  }
  if (kindOf(command) !== 'object') return { error: `a command is a JSON object, not ${kindOf(command)}` };
  const id = Number.isSafeInteger(command.id) && command.id >= 0 ? command.id : null;
  if (id === null) return { error: 'id must be an unsigned integer' };
  if (typeof command.method !== 'string') return { id, error: 'method must be a string' };
  if (kindOf(command.params) !== 'object') return { id, error: 'params must be an object' };
  const channel = command['goog:channel'];
  if (channel !== undefined && typeof channel !== 'string') return { id, error: 'goog:channel must be a string' };
  return { command: { id, method: command.method, params: command.params, 'goog:channel': channel || undefined } };
}

function send(ws, message) {
  if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message));
}

// One BiDi session: its client socket, its CDP socket and the mapper between them.
async function serve(client, url) {
  const pending = []; // commands that arrive while the mapper starts
  let deliver = (command) => pending.push(command);
  let mapper = null;
  let cdp = null;
  let closed = false;
  const close = (code, reason) => {
    if (closed) return;
    closed = true;
    if (code !== 1000) process.stderr.write(`bidi: closing a session: ${code} ${reason}\n`);
    try {
      mapper?.close();
    } catch {}
    if (cdp && cdp.readyState <= WebSocket.OPEN) cdp.close();
    if (client.readyState <= WebSocket.OPEN) client.close(code, reason);
  };

  client.on('message', (data) => {
    const parsed = parseCommand(data.toString());
    if (parsed.error) {
      send(client, { type: 'error', id: parsed.id ?? null, error: 'invalid argument', message: parsed.error });
      return;
    }
    const { command } = parsed;
    // The browser belongs to the Hangar session, which ends through the API (or its timeout):
    // ending the BiDi session closes this connection and leaves the browser running.
    if (command.method === 'session.end') {
      send(client, { type: 'success', id: command.id, result: {} });
      close(1000, 'session ended');
      return;
    }
    deliver(command);
  });
  client.on('close', () => close(1000, ''));
  client.on('error', () => close(1011, 'client error'));

  try {
    // The agent names the current Chromium's DevTools socket (port, path) when it knows it.
    const query = new URL(url ?? '/', 'http://mapper').searchParams;
    const port = Number(query.get('port'));
    const path = query.get('path');
    const endpoint = port > 0 && port < 65536 && path?.startsWith('/devtools/') ? `ws://127.0.0.1:${port}${path}` : cdpEndpoint;
    const dial = (url) =>
      new Promise((resolve, reject) => {
        const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 });
        ws.once('open', () => resolve(ws));
        ws.once('error', reject);
      });
    try {
      cdp = await dial(endpoint);
    } catch (err) {
      // The Chromium the agent named went away (a restart under way): the agent's /cdp waits for
      // the current one.
      if (endpoint === cdpEndpoint) throw err;
      process.stderr.write(`bidi: ${endpoint} refused (${err?.message ?? err}); trying the agent's /cdp\n`);
      cdp = await dial(cdpEndpoint);
    }
    if (closed) {
      cdp.close(); // the client left while we dialled
      return;
    }
    let onCdpMessage = null;
    cdp.on('message', (data) => onCdpMessage?.(data.toString()));
    cdp.on('close', () => close(1011, 'the browser connection closed (Chromium restarted or the session ended)'));
    const connection = new MapperCdpConnection({
      setOnMessage: (handler) => (onCdpMessage = handler),
      sendMessage: (message) => {
        if (cdp.readyState === WebSocket.OPEN) cdp.send(message);
      },
      close: () => cdp.close(),
    });
    let onBidiMessage = null;
    mapper = await BidiServer.createAndStart(
      {
        setOnMessage: (handler) => (onBidiMessage = handler),
        sendMessage: (message) => send(client, message),
        close: () => {},
      },
      connection,
      await connection.createBrowserSession(),
      '', // no mapper tab to hide: the mapper runs here
      new BidiParser(),
    );
    if (closed) {
      mapper.close();
      return;
    }
    deliver = (command) => onBidiMessage(command);
    for (const command of pending.splice(0)) deliver(command);
  } catch (err) {
    process.stderr.write(`bidi: could not start a session: ${err?.message ?? err}\n`);
    close(1011, 'could not reach the browser');
  }
}

try {
  unlinkSync(socketPath); // a socket left by an earlier mapper of this instance
} catch {}
const http = createServer((req, res) => {
  res.writeHead(426, { 'content-type': 'text/plain' });
  res.end('WebDriver BiDi: upgrade to a WebSocket\n');
});
const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 });
http.on('upgrade', (req, socket, head) => wss.handleUpgrade(req, socket, head, (ws) => void serve(ws, req.url)));

// Client connections the agent hands over on Node's IPC channel (fd 3, set up by the agent): the
// client's own socket with the upgrade request the agent rewrote for it, then the agent's
// connection to the server, which lives as long as the client's does (the server counts the
// session active until it closes). Served like a connection on the unix socket from there on.
const handedOver = new Map();
process.on('message', (message, socket) => {
  if (!socket) return;
  const { hangar, id } = message ?? {};
  if (hangar === 'bidi-client' && typeof message.head === 'string') {
    socket.on('error', () => {});
    handedOver.set(id, { socket, head: message.head });
    return;
  }
  const client = hangar === 'bidi-lifeline' ? handedOver.get(id) : undefined;
  handedOver.delete(id);
  if (!client) {
    socket.destroy();
    return;
  }
  socket.on('error', () => {});
  socket.on('close', () => client.socket.destroy()); // the server stopped
  socket.resume(); // nothing comes on it but its end
  client.socket.on('close', () => socket.destroy());
  client.socket.setNoDelay(true);
  client.socket.unshift(Buffer.from(client.head));
  http.emit('connection', client.socket);
});
process.on('disconnect', () => process.exit(0)); // the agent is gone
http.listen(socketPath, () => process.stdout.write('ready\n'));

