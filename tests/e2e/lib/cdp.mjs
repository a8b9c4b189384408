// A minimal raw CDP client over one WebSocket (the `ws` package: Node 20 has no global WebSocket
// without --experimental-websocket). Used by the tests and the benchmarks alike.
import WebSocket from 'ws';

export { WebSocket };

/** Opens a WebSocket; resolves once open, rejects on error/unexpected response/timeout. */
export function openWebSocket(url, { timeoutMs = 30_000, ...options } = {}) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 256 * 1024 * 1024, ...options });
    const timer = setTimeout(() => {
      ws.terminate();
      reject(new Error(`WebSocket ${redact(url)} did not open within ${timeoutMs} ms`));
    }, timeoutMs);
    ws.once('open', () => {
      clearTimeout(timer);
      resolve(ws);
    });
    ws.once('unexpected-response', (_req, res) => {
      clearTimeout(timer);
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => {
        const err = new Error(`WebSocket ${redact(url)} refused: HTTP ${res.statusCode} ${body}`);
        err.statusCode = res.statusCode;
        err.body = body;
        reject(err);
      });
    });
    ws.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

export class CdpClient {
  /** @param {WebSocket} ws */
  constructor(ws) {
    this.ws = ws;
    this.nextId = 1;
    this.pending = new Map();
    this.events = [];
    ws.on('message', (data) => {
      let msg;
      try {
        msg = JSON.parse(data.toString());
      } catch {
        return;
      }
      if (msg.id !== undefined && this.pending.has(msg.id)) {
        const { resolve, reject } = this.pending.get(msg.id);
        this.pending.delete(msg.id);
        if (msg.error) reject(Object.assign(new Error(`CDP error: ${msg.error.message}`), { cdp: msg.error }));
        else resolve(msg.result);
      } else if (msg.method) {
        this.events.push(msg);
      }
    });
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() };
      for (const { reject } of this.pending.values()) reject(new Error(`CDP socket closed (${code} ${reason})`));
      this.pending.clear();
    });
  }

  static async connect(url, opts) {
    return new CdpClient(await openWebSocket(url, opts));
  }

  send(method, params = {}, sessionId) {
    const id = this.nextId++;
    const msg = { id, method, params };
    if (sessionId) msg.sessionId = sessionId;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify(msg), (err) => {
        if (err) {
          this.pending.delete(id);
          reject(err);
        }
      });
    });
  }

  /** Attaches to the first page target (flatten mode) and returns its sessionId. */
  async attachToPage() {
    const { targetInfos } = await this.send('Target.getTargets');
    const page = targetInfos.find((t) => t.type === 'page');
    if (!page) throw new Error('no page target');
    const { sessionId } = await this.send('Target.attachToTarget', { targetId: page.targetId, flatten: true });
    return sessionId;
  }

  close() {
    return closeWebSocket(this.ws);
  }
}

/** Closes a WebSocket, forcibly after 2 s; resolves once it is closed. */
export function closeWebSocket(ws) {
  return new Promise((resolve) => {
    if (ws.readyState === WebSocket.CLOSED) return resolve();
    ws.once('close', () => resolve());
    ws.close();
    setTimeout(() => {
      ws.terminate();
      resolve();
    }, 2000).unref();
  });
}

/** Hides the capability token in messages. */
export function redact(url) {
  return String(url).replace(/jwt=[^&]+/, 'jwt=…');
}
