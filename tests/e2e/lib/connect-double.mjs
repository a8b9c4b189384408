// TEST DOUBLE — not 1Password. A small server that answers the part of the 1Password Connect
// REST API Hangar's credential providers use, shaped after 1Password's published Connect API
// document, because no real Connect server can run on these machines:
//
//   GET /v1/vaults                          → [{id, name, ...}]
//   GET /v1/vaults/{vaultUUID}/items        → item summaries {id, title, vault{id}, category, urls[{href, primary}]}
//   GET /v1/vaults/{vaultUUID}/items/{id}   → the full item, with fields {id, type, purpose, label, value, totp?}
//
// Every request needs `Authorization: Bearer <token>`; a wrong one gets 401
// {"status": 401, "message": "Invalid token"} as Connect answers. `hits` records each request's
// path so a test can tell a cached answer from a fresh one.
import http from 'node:http';
import https from 'node:https';

import { listenAllowed } from './server.mjs';

/**
 * @param {object} opts
 * @param {string} opts.token  the access token the server accepts
 * @param {Array<{id: string, name: string, items: Array<object>}>} opts.vaults  items are FullItems
 * @param {{key: string, cert: string}} [opts.tls]  serve HTTPS with this PEM key and certificate
 * @param {boolean} [opts.silent]  accept connections and never answer (for timeouts)
 */
export async function startConnectDouble({ token, vaults, tls, silent }) {
  const hits = [];
  const reply = (res, status, body) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const summary = (vault, item) => {
    const { fields, sections, ...rest } = item;
    return { ...rest, vault: { id: vault.id } };
  };
  const handler = (req, res) => {
    const url = new URL(req.url, 'http://x');
    hits.push(url.pathname);
    if (silent) return;
    if (req.headers.authorization !== `Bearer ${token}`) {
      return reply(res, 401, { status: 401, message: 'Invalid token' });
    }
    const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    if (req.method !== 'GET' || parts[0] !== 'v1' || parts[1] !== 'vaults') {
      return reply(res, 404, { status: 404, message: 'Not found' });
    }
    if (parts.length === 2) {
      return reply(res, 200, vaults.map((v) => ({ id: v.id, name: v.name, type: 'USER_CREATED', items: v.items.length })));
    }
    const vault = vaults.find((v) => v.id === parts[2]);
    if (!vault) return reply(res, 404, { status: 404, message: 'Invalid Vault UUID' });
    if (parts.length === 4 && parts[3] === 'items') {
      return reply(res, 200, vault.items.map((i) => summary(vault, i)));
    }
    if (parts.length === 5 && parts[3] === 'items') {
      const item = vault.items.find((i) => i.id === parts[4]);
      if (!item) return reply(res, 404, { status: 404, message: 'Invalid Item UUID' });
      return reply(res, 200, { ...item, vault: { id: vault.id } });
    }
    return reply(res, 404, { status: 404, message: 'Not found' });
  };
  const srv = tls ? https.createServer(tls, handler) : http.createServer(handler);
  // A port the tests' servers let themselves dial (HANGAR_FETCH_ALLOW).
  await listenAllowed(srv);
  return {
    url: `${tls ? 'https' : 'http'}://127.0.0.1:${srv.address().port}`,
    hits,
    close: () =>
      new Promise((r) => {
        srv.closeAllConnections?.();
        srv.close(() => r());
      }),
  };
}
