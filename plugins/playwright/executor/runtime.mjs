// What every runtime of the playwright plugin (executor, REPL, WebMCP service) does the same way:
// keep one Playwright connection to its browser, and answer the agent's JSON-lines calls.
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

// A function giving the connected browser, connecting on first use and again once the connection
// dropped: the agent's /cdp relay always dials the current Chromium, so after a restart
// (viewport change, crash) the same endpoint reaches the new one.
export function browserConnection(endpoint) {
  let browser = null;
  let connecting = null;
  return function connect() {
    if (browser?.isConnected()) return browser;
    connecting ??= chromium.connectOverCDP(endpoint).then(
      (b) => {
        browser = b;
        connecting = null;
        return b;
      },
      (e) => {
        connecting = null;
        throw e;
      },
    );
    return connecting;
  };
}

// Calls arrive as JSON lines on fd 3 and are answered as JSON lines on stdout, carrying the call's
// id: one after another in arrival order (`serial`), or each as soon as it is done. The agent
// closing the stream means it is going away: what was asked is answered first.
export function serveCalls(answer, { serial }) {
  let tail = Promise.resolve();
  const reply = (call) =>
    Promise.resolve()
      .then(() => answer(call))
      .then((a) => process.stdout.write(JSON.stringify({ id: call.id, ...a }) + '\n'));
  const lines = createInterface({ input: createReadStream(null, { fd: 3 }), crlfDelay: Infinity });
  lines.on('line', (line) => {
    if (!line.trim()) return;
    let call;
    try {
      call = JSON.parse(line);
    } catch {
      process.stderr.write('ignoring a line that is not JSON\n');
      return;
    }
    if (serial) tail = tail.then(() => reply(call));
    else reply(call);
  });
  lines.on('close', () => tail.then(() => process.exit(0)));
}
