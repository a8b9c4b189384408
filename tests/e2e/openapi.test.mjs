// GET /openapi.json: served without a key, a valid-looking OpenAPI 3.1 document assembled from
// the loaded plugins, and held against the route table the server logs at debug level
// (`route METHOD PATTERN`): no route undocumented, no documented route missing. A plugin without
// a fragment (the SDK example) shows up as undocumented, so the diff is known to catch one.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { examplePlugins, startServer } from './lib/server.mjs';

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];

/** `METHOD /pattern` of every route the server registered, `{rest*}` written as `{rest}`. */
function registeredRoutes(output) {
  const routes = new Set();
  for (const m of output.matchAll(/route (GET|PUT|POST|DELETE|PATCH|HEAD|OPTIONS) (\/\S*)/g)) {
    routes.add(`${m[1]} ${m[2].replace(/\{([^}*]+)\*\}/g, '{$1}')}`);
  }
  return routes;
}

function documentedRoutes(doc) {
  const routes = new Set();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of METHODS) if (item[method]) routes.add(`${method.toUpperCase()} ${path}`);
  }
  return routes;
}

function diff(registered, documented) {
  return {
    undocumented: [...registered].filter((r) => !documented.has(r)).sort(),
    missing: [...documented].filter((r) => !registered.has(r)).sort(),
  };
}

/** Every `$ref` in the document points at something in it. */
function danglingRefs(doc) {
  const out = [];
  const walk = (node) => {
    if (Array.isArray(node)) return node.forEach(walk);
    if (!node || typeof node !== 'object') return;
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && typeof v === 'string') {
        let cur = doc;
        for (const part of v.replace(/^#\//, '').split('/')) cur = cur?.[part.replace(/~1/g, '/').replace(/~0/g, '~')];
        if (cur === undefined) out.push(v);
      } else walk(v);
    }
  };
  walk(doc);
  return out;
}

async function fetchDoc(server) {
  const res = await fetch(new URL('/openapi.json', server.baseURL)); // no Authorization header
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /application\/json/);
  return res.json();
}

describe('the built-in plugins', () => {
  let server;
  let doc;

  before(async () => {
    server = await startServer({ env: { HANGAR_LOG_LEVEL: 'debug' } });
    doc = await fetchDoc(server);
  });
  after(async () => {
    await server?.stop();
  });

  test('is an OpenAPI 3.1 document with the error body and the list headers', () => {
    assert.equal(doc.openapi, '3.1.0');
    assert.deepEqual(doc.components.schemas.Error.required, ['code', 'message']);
    const list = doc.paths['/browsers'].get.responses['200'];
    assert.ok(list.headers['X-Has-More'] && list.headers['X-Next-Offset']);
    assert.equal(doc.paths['/browsers/{id}/logs/stream'].get.responses['200'].content['text/event-stream'] !== undefined, true);
    assert.deepEqual(danglingRefs(doc), []);
  });

  test('documents every route the server registered, and nothing else', () => {
    const registered = registeredRoutes(server.output());
    assert.ok(registered.size > 50, `route lines in the debug log (found ${registered.size})`);
    assert.deepEqual(diff(registered, documentedRoutes(doc)), { undocumented: [], missing: [] });
  });

  test('every operation has an id, a success answer and the error answer', () => {
    const ids = new Set();
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const method of METHODS) {
        const op = item[method];
        if (!op) continue;
        assert.ok(op.operationId && !ids.has(op.operationId), `${method} ${path}: a unique operationId`);
        ids.add(op.operationId);
        assert.ok(op.responses.default, `${method} ${path}: a default (error) response`);
      }
    }
  });

  // The links schemathesis' stateful phase chains (tests/api/fuzz_api.py): each create's answer
  // names, by operationId, operations that take the new id, through parameters they have, from a
  // field its success schema defines. A renamed operation or field breaks the chain silently.
  test('the create operations link to the operations on what they created', () => {
    const ops = new Map();
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const method of METHODS) {
        if (!item[method]) continue;
        const params = [...(item.parameters || []), ...(item[method].parameters || [])]
          .map((p) => (p.$ref ? doc.components.parameters[p.$ref.split('/').pop()] : p));
        ops.set(item[method].operationId, { path, params });
      }
    }
    const resolve = (schema) => (schema?.$ref ? doc.components.schemas[schema.$ref.split('/').pop()] : schema);
    // The properties a schema defines, its allOf parts' included.
    const fields = (schema) => {
      const s = resolve(schema) || {};
      return Object.assign({}, ...(s.allOf || []).map(fields), s.properties || {});
    };
    const linked = [];
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const method of METHODS) {
        for (const [status, res] of Object.entries(item[method]?.responses || {})) {
          for (const [name, link] of Object.entries(res.links || {})) {
            const where = `${method} ${path} ${status} links.${name}`;
            const target = ops.get(link.operationId);
            assert.ok(target, `${where}: no operation ${link.operationId}`);
            for (const [qualified, expr] of Object.entries(link.parameters)) {
              // "header.Mcp-Session-Id": a parameter named with where it goes.
              const [, location, param] = /^(?:(path|query|header)\.)?(.+)$/.exec(qualified);
              assert.ok(target.params.some((p) => p.name === param && (!location || p.in === location)),
                `${where}: ${link.operationId} has no parameter ${qualified}`);
              const field = /^\$response\.body#\/(\w+)$/.exec(expr)?.[1];
              const header = /^\$response\.header\.([\w-]+)$/.exec(expr)?.[1];
              if (field) {
                assert.ok(fields(res.content['application/json'].schema)[field], `${where}: the answer has no ${field}`);
              } else if (header) {
                assert.ok(res.headers?.[header], `${where}: the answer documents no header ${header}`);
              } else {
                assert.match(expr, /^\$request\.path\.\w+$/, where);
              }
            }
            linked.push(`${method.toUpperCase()} ${path}`);
          }
        }
      }
    }
    for (const create of ['/browsers', '/profiles', '/proxies', '/credentials', '/browser_pools', '/extensions',
      '/auth/connections', '/org/projects', '/org/api_keys', '/org/credential_providers', '/deployments', '/invocations',
      '/telemetry/destinations', '/audit-logs/export/destinations', '/vaults', '/browsers/{id}/fs/watch',
      '/browsers/{id}/process/spawn', '/mcp']) {
      assert.ok(linked.includes(`POST ${create}`), `POST ${create} has links`);
    }
  });

  // No area of the contract is left without its plugin: the last ones (apps, managed auth) are
  // documented by their plugins' fragments like every other.
  test('the areas built last (apps, invocations, managed auth, MCP) are in it', () => {
    for (const prefix of ['/deployments', '/invocations', '/apps', '/auth/connections', '/mcp']) {
      assert.ok(Object.keys(doc.paths).some((p) => p.startsWith(prefix)), prefix);
    }
  });
});

describe('a plugin installed without an OpenAPI fragment', () => {
  let server;
  let doc;

  before(async () => {
    const plugins = await examplePlugins();
    server = await startServer({
      extraPluginDir: plugins.hello,
      enablePlugins: ['hello'],
      env: { HANGAR_LOG_LEVEL: 'debug' },
    });
    doc = await fetchDoc(server);
  });
  after(async () => {
    await server?.stop();
  });

  test('is named in the log, and the diff reports its routes as undocumented', () => {
    assert.match(server.output(), /plugin hello has no hello\.openapi\.json beside it/);
    const { undocumented, missing } = diff(registeredRoutes(server.output()), documentedRoutes(doc));
    assert.ok(undocumented.length > 0 && undocumented.every((r) => r.includes('hello')), undocumented.join(', '));
    assert.deepEqual(missing, []);
  });
});
