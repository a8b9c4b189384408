// Calls from the executor, the REPL and CDP-backed custom tools back to the instance's agent (its
// unix socket, HANGAR_AGENT_SOCKET), so that `webmcp` in a snippet reaches the one WebMCP service
// of this browser instead of each runtime tracking tools on its own.
import http from 'node:http';

export function agentRequest(method, path, body) {
  const socketPath = process.env.HANGAR_AGENT_SOCKET;
  if (!socketPath) return Promise.reject(new Error('HANGAR_AGENT_SOCKET is not set'));
  const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        socketPath,
        method,
        path,
        headers: data ? { 'content-type': 'application/json', 'content-length': data.length } : {},
      },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed;
          try {
            parsed = text ? JSON.parse(text) : null;
          } catch {
            parsed = { message: text };
          }
          if (res.statusCode >= 400) {
            const e = new Error(parsed?.message ?? `HTTP ${res.statusCode}`);
            e.code = parsed?.code;
            e.status = res.statusCode;
            reject(e);
          } else resolve(parsed);
        });
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

// The `webmcp` object snippets get (kernel-api-0131.md §1G): the same tools, refs and results as
// the HTTP API.
export const webmcp = Object.freeze({
  async listTools({ excludeCustom = false } = {}) {
    return (await agentRequest('GET', `/webmcp/tools${excludeCustom ? '?exclude_custom=true' : ''}`)).tools;
  },
  invokeTool(toolRef, input = {}, { timeoutSec } = {}) {
    return agentRequest('POST', '/webmcp/invoke', {
      tool_ref: toolRef,
      input,
      ...(timeoutSec === undefined ? {} : { timeout_sec: timeoutSec }),
    });
  },
});
