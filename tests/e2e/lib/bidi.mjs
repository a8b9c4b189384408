// A minimal raw WebDriver BiDi client over one WebSocket, for the tests and the benchmarks: the
// wire format is the spec's (commands {id, method, params}; answers {type: 'success' | 'error',
// id, ...}; events {type: 'event', method, params}).
import { closeWebSocket, openWebSocket } from './cdp.mjs';

export class BidiClient {
  /** @param {WebSocket} ws */
  constructor(ws) {
    this.ws = ws;
    this.nextId = 1;
    this.pending = new Map();
    this.events = [];
    ws.on('message', (data) => {
      const msg = JSON.parse(data.toString());
      if (msg.type === 'event') {
        this.events.push(msg);
        return;
      }
      const waiter = this.pending.get(msg.id);
      if (!waiter) {
        this.unmatched = msg; // an error the remote end could not tie to a command (id null)
        return;
      }
      this.pending.delete(msg.id);
      if (msg.type === 'success') waiter.resolve(msg.result);
      else waiter.reject(Object.assign(new Error(`BiDi ${msg.error}: ${msg.message}`), { bidi: msg }));
    });
    this.closedPromise = new Promise((resolve) => {
      ws.on('close', (code, reason) => {
        this.closed = { code, reason: reason.toString() };
        for (const { reject } of this.pending.values()) reject(new Error(`BiDi socket closed (${code} ${reason})`));
        this.pending.clear();
        resolve(this.closed);
      });
    });
  }

  static async connect(url, opts) {
    return new BidiClient(await openWebSocket(url, opts));
  }

  send(method, params = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ id, method, params }), (err) => {
        if (err) {
          this.pending.delete(id);
          reject(err);
        }
      });
    });
  }

  /** session.new, then the first top-level browsing context's id. */
  async start() {
    const session = await this.send('session.new', { capabilities: {} });
    const { contexts } = await this.send('browsingContext.getTree', {});
    return { session, context: contexts[0].context, contexts };
  }

  close() {
    return closeWebSocket(this.ws);
  }
}
