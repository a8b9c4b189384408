// The Hangar dashboard: a client of the public API only. The key lives in sessionStorage (this
// tab) and goes out as a Bearer token; nothing is stored server-side for the page.
'use strict';

const $ = (id) => document.getElementById(id);
const store = window.sessionStorage;
let streams = []; // AbortControllers of the open detail's streams

function headers() {
  const h = { Authorization: `Bearer ${store.getItem('hangar.key')}` };
  const project = store.getItem('hangar.project');
  if (project) h['X-Kernel-Project-Id'] = project;
  return h;
}

async function api(path, init = {}) {
  const res = await fetch(path, { ...init, headers: { ...headers(), ...(init.headers || {}) } });
  if (!res.ok) {
    let message = `${res.status}`;
    try {
      message = `${res.status} ${(await res.json()).message}`;
    } catch {
      // not a wire error body
    }
    const err = new Error(message);
    err.status = res.status;
    throw err;
  }
  return res.status === 204 ? null : res.json();
}

function cell(row, text, className) {
  const td = document.createElement('td');
  td.textContent = text ?? '';
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

const when = (ts) => (ts ? new Date(ts).toLocaleString() : '');

function duration(s) {
  const end = s.deleted_at ? Date.parse(s.deleted_at) : Date.now();
  let secs = Math.max(0, Math.round((end - Date.parse(s.created_at)) / 1000));
  const h = Math.floor(secs / 3600);
  secs -= h * 3600;
  const m = Math.floor(secs / 60);
  return `${h ? `${h}h ` : ''}${h || m ? `${m}m ` : ''}${secs % 60}s`;
}

async function loadSessions() {
  const sessions = await api('/browsers?status=all&limit=100');
  const body = $('sessions');
  body.replaceChildren();
  for (const s of sessions) {
    const tr = document.createElement('tr');
    const active = !s.deleted_at;
    tr.className = `session ${active ? 'active' : 'deleted'}`;
    tr.dataset.id = s.session_id;
    cell(tr, active ? 'active' : 'deleted', `status ${active ? 'active' : 'deleted'}`);
    cell(tr, s.name || '');
    cell(tr, s.session_id, 'mono');
    cell(tr, when(s.created_at));
    cell(tr, duration(s));
    cell(tr, s.headless ? 'headless' : 'headful');
    tr.addEventListener('click', () => openDetail(s));
    body.appendChild(tr);
  }
  $('sessions-count').textContent = `(${sessions.length})`;
}

async function loadPools() {
  const body = $('pools');
  body.replaceChildren();
  let pools = [];
  try {
    pools = await api('/browser_pools?limit=100');
  } catch (e) {
    const tr = document.createElement('tr');
    cell(tr, `pools unavailable: ${e.message}`).colSpan = 5;
    body.appendChild(tr);
    return;
  }
  for (const p of pools) {
    const tr = document.createElement('tr');
    cell(tr, p.name || '');
    cell(tr, p.id);
    cell(tr, p.browser_pool_config?.size ?? '');
    cell(tr, p.available_count);
    cell(tr, p.acquired_count);
    body.appendChild(tr);
  }
}

async function loadKeys() {
  const body = $('keys');
  body.replaceChildren();
  const keys = await api('/org/api_keys?limit=100');
  for (const k of keys) {
    const tr = document.createElement('tr');
    cell(tr, k.name);
    cell(tr, k.masked_key);
    cell(tr, k.project_name ?? 'all projects');
    cell(tr, when(k.created_at));
    cell(tr, k.expires_at ? when(k.expires_at) : 'never');
    body.appendChild(tr);
  }
}

// Reads a server-sent event stream with the Bearer header (EventSource cannot send one) and
// appends each event's message to `pre`, keeping the last 200 lines.
async function tail(path, pre, render) {
  const ctl = new AbortController();
  streams.push(ctl);
  try {
    const res = await fetch(path, { headers: { ...headers(), Accept: 'text/event-stream' }, signal: ctl.signal });
    if (!res.ok) {
      pre.textContent = res.status === 404 || res.status === 501 ? 'not available on this server' : `error ${res.status}`;
      return;
    }
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
        if (!data) continue;
        let line = data;
        try {
          line = render(JSON.parse(data));
        } catch {
          // show the raw data
        }
        const lines = (pre.textContent + line + '\n').split('\n');
        pre.textContent = lines.slice(-201).join('\n');
        pre.scrollTop = pre.scrollHeight;
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') pre.textContent += `\n(stream ended: ${e.message})`;
  }
}

function closeDetail() {
  for (const c of streams) c.abort();
  streams = [];
  $('detail').hidden = true;
  $('live-view').removeAttribute('src');
  $('replay-player').removeAttribute('src');
  $('replay-player').hidden = true;
}

async function openDetail(s) {
  closeDetail();
  $('detail').hidden = false;
  $('detail-id').textContent = s.session_id;
  const live = !s.deleted_at && s.browser_live_view_url;
  $('live-view').hidden = !live;
  $('live-status').hidden = !live;
  $('live-status').textContent = 'connecting…';
  $('live-view-none').hidden = !!live;
  if (live) $('live-view').src = s.browser_live_view_url;
  $('logs').textContent = '';
  $('telemetry').textContent = '';
  const list = $('replays');
  list.replaceChildren();
  try {
    const replays = await api(`/browsers/${encodeURIComponent(s.session_id)}/replays`);
    if (!replays.length) list.innerHTML = '<li>none</li>';
    for (const r of replays) {
      const li = document.createElement('li');
      const a = document.createElement('a');
      a.href = '#';
      a.textContent = `${r.replay_id} (${when(r.started_at)})`;
      a.addEventListener('click', (ev) => {
        ev.preventDefault();
        $('replay-player').hidden = false;
        $('replay-player').src = r.replay_view_url;
      });
      li.appendChild(a);
      list.appendChild(li);
    }
  } catch (e) {
    list.textContent = `replays unavailable: ${e.message}`;
  }
  if (!s.deleted_at) {
    const id = encodeURIComponent(s.session_id);
    tail(`/browsers/${id}/logs/stream?source=supervisor&supervisor_process=chromium`, $('logs'), (e) => e.message);
    tail(`/browsers/${id}/telemetry/stream`, $('telemetry'), (e) => JSON.stringify(e));
  } else {
    $('logs').textContent = 'the session has ended';
    $('telemetry').textContent = 'the session has ended';
  }
  $('detail').scrollIntoView();
}

function showSignIn(message) {
  closeDetail();
  $('app').hidden = true;
  $('signout').hidden = true;
  $('who').hidden = true;
  $('signin').hidden = false;
  $('signin-error').hidden = !message;
  $('signin-error').textContent = message || '';
}

async function showApp() {
  try {
    await loadSessions();
  } catch (e) {
    store.removeItem('hangar.key');
    store.removeItem('hangar.project');
    showSignIn(
      e.status === 401
        ? 'Sign-in failed: this API key is not valid (wrong, expired or deleted).'
        : `Sign-in failed: ${e.message}`,
    );
    return;
  }
  $('signin').hidden = true;
  $('signin-error').hidden = true;
  $('app').hidden = false;
  $('signout').hidden = false;
  $('who').hidden = false;
  $('who').textContent = store.getItem('hangar.project') || "the key's project";
  await Promise.allSettled([loadPools(), loadKeys().catch((e) => ($('keys').textContent = e.message))]);
}

$('signin').addEventListener('submit', (ev) => {
  ev.preventDefault();
  store.setItem('hangar.key', $('api-key').value.trim());
  const project = $('project-id').value.trim();
  if (project) store.setItem('hangar.project', project);
  else store.removeItem('hangar.project');
  $('api-key').value = '';
  showApp();
});
$('signout').addEventListener('click', () => {
  store.removeItem('hangar.key');
  store.removeItem('hangar.project');
  showSignIn();
});
$('detail-close').addEventListener('click', closeDetail);
// The live view page tells its parent once its screen is connected (as Kernel's viewer does).
window.addEventListener('message', (ev) => {
  if (ev.source === $('live-view').contentWindow && ev.data?.type === 'KERNEL_CONNECTED')
    $('live-status').textContent = 'connected';
});

if (store.getItem('hangar.key')) showApp();
else showSignIn();
