// A plain CDP connection with flattened sessions, for the WebMCP service's per-tab traffic: a
// Playwright CDPSession costs about a millisecond more per message (its client/server layers),
// and a WebMCP invocation is two messages.
import { createRequire } from 'node:module';

const { ws: WebSocket } = createRequire(import.meta.url)('playwright-core/lib/utilsBundle');

export class Cdp {
  static async connect(endpoint) {
    let url = endpoint;
    // A DevTools HTTP endpoint (a bare Chromium, outside Hangar) names its browser WebSocket.
    if (/^https?:/.test(endpoint)) url = (await (await fetch(`${endpoint}/json/version`)).json()).webSocketDebuggerUrl;
    const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 });
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    return new Cdp(ws);
  }

  constructor(ws) {
    this.ws = ws;
    this.nextId = 1;
    this.pending = new Map();
    this.handlers = new Map(); // sessionId → Map(event → [fn])
    ws.on('message', (data) => {
      const m = JSON.parse(data.toString());
      if (m.id !== undefined) {
        const p = this.pending.get(m.id);
        this.pending.delete(m.id);
        if (m.error) p?.reject(new Error(`${p.method}: ${m.error.message}`));
        else p?.resolve(m.result);
      } else if (m.method) {
        for (const fn of this.handlers.get(m.sessionId ?? '')?.get(m.method) ?? []) fn(m.params);
      }
    });
    this.closed = new Promise((resolve) => ws.once('close', resolve));
  }

  send(method, params = {}, sessionId) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      this.ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
    });
  }

  // A flattened session on one target, with the same send/on shape as Playwright's CDPSession.
  async attach(targetId) {
    const { sessionId } = await this.send('Target.attachToTarget', { targetId, flatten: true });
    return this.session(sessionId);
  }

  // A session Chromium attached on its own (Target.setAutoAttach), by its id.
  session(sessionId) {
    const events = new Map();
    this.handlers.set(sessionId, events);
    return {
      send: (method, params) => this.send(method, params, sessionId),
      on: (event, fn) => events.set(event, [...(events.get(event) ?? []), fn]),
      detach: () => {
        this.handlers.delete(sessionId);
        return this.send('Target.detachFromTarget', { sessionId }).catch(() => {});
      },
    };
  }
}
