// A bounded API load: `clients` concurrent clients, each on its own keep-alive connection (as
// 200 separate agent processes would be), looping over reads and writes until `seconds` pass.
// Only 127.0.0.1 is ever dialled. Returns latencies per operation and every failure seen.
import http from 'node:http';

const now = () => Number(process.hrtime.bigint()) / 1e6;

function request(agent, port, apiKey, method, path, body) {
  return new Promise((resolve) => {
    const t0 = now();
    const data = body ? JSON.stringify(body) : undefined;
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        agent,
        headers: {
          authorization: `Bearer ${apiKey}`,
          ...(data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {}),
        },
        timeout: 15_000,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode, ms: now() - t0 }));
        res.on('error', (e) => resolve({ status: 0, error: e.code || e.message, ms: now() - t0 }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve({ status: 0, error: e.code || e.message, ms: now() - t0 }));
    req.end(data);
  });
}

/**
 * @param {{port:number, apiKey:string, sessionIds:string[], clients:number, seconds:number}} o
 * @returns {Promise<{count:number, byOp:Record<string, number[]>, failures:object[]}>}
 */
export async function apiLoad({ port, apiKey, sessionIds, clients, seconds }) {
  const deadline = now() + seconds * 1000;
  const byOp = { list: [], get: [], update: [] };
  const failures = [];
  let count = 0;
  const ops = [
    ['list', () => ['GET', '/browsers?limit=20']],
    ['get', (i) => ['GET', `/browsers/${sessionIds[i % sessionIds.length]}`]],
    ['get', (i) => ['GET', `/browsers/${sessionIds[(i + 1) % sessionIds.length]}`]],
    ['update', (i, n) => ['PATCH', `/browsers/${sessionIds[i % sessionIds.length]}`, { tags: { client: String(i), n: String(n) } }]],
  ];
  await Promise.all(
    Array.from({ length: clients }, async (_, i) => {
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      let n = 0;
      while (now() < deadline) {
        const [name, make] = ops[(i + n) % ops.length];
        const [method, path, body] = make(i, n);
        const r = await request(agent, port, apiKey, method, path, body);
        count++;
        n++;
        if (r.status >= 200 && r.status < 300) byOp[name].push(r.ms);
        else if (failures.length < 50) failures.push({ op: name, status: r.status, error: r.error });
        else failures.push(null);
      }
      agent.destroy();
    }),
  );
  return { count, byOp, failures };
}
