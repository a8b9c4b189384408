// The live-view page: a noVNC client filling the window. Served at /browser/live/{token}; its
// WebSocket is /browser/live/{token}/ws and noVNC itself comes from /liveview/novnc/ (Debian's
// novnc package), both found relative to the page so a path prefix in front of Hangar still works.
// Served under the strict page policy (hangar/web.hpp): {{nonce}} is the answer's script nonce.
#pragma once

#include <string>
#include <string_view>

namespace hangar::liveview {

// The start of both viewer pages' scripts: the link's read-only flag, where the stream is, the
// status line, and the session's state once the stream drops.
inline constexpr std::string_view kViewerPrelude = R"js(const params = new URLSearchParams(location.search);
const yes = (v) => v !== null && ['1', 'true', 'yes'].includes(v.toLowerCase());
const readOnly = ['readOnly', 'readonly', 'ro'].some((k) => yes(params.get(k)));
const page = location.pathname.replace(/\/+$/, '');
const wsUrl = new URL(page + '/ws' + (readOnly ? '?readOnly=true' : ''), location.href);
wsUrl.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
const statusBox = document.getElementById('status');
const say = (text) => { statusBox.textContent = text; statusBox.classList.toggle('hidden', !text); };

async function sessionState() {
  try {
    const r = await fetch(page + '/status', { cache: 'no-store' });
    if (r.ok) return (await r.json()).state;
    return r.status === 404 ? 'ended' : 'unknown';
  } catch {
    return 'unknown';
  }
}
)js";

// What both viewer pages start with, up to their own styles (kViewerHead, kScreencastHead).
inline constexpr std::string_view kPageTop = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>Live view</title>
<style nonce="{{nonce}}">
  html, body { margin: 0; height: 100%; background: #202124; overflow: hidden; }
  #status { position: absolute; inset: 0; display: flex; align-items: center; justify-content: center;
            color: #e8eaed; font: 16px system-ui, sans-serif; pointer-events: none; }
  #status.hidden { display: none; }
)html";

inline constexpr std::string_view kViewerHead = R"html(  #screen { position: absolute; inset: 0; }
</style>
</head>
<body>
<div id="screen"></div>
<div id="status">Connecting…</div>
<script type="module" nonce="{{nonce}}">
import RFB from '../../liveview/novnc/core/rfb.js';

)html";
inline constexpr std::string_view kViewerScript = R"html(
let rfb = null;
let retries = 0;

function connect() {
  rfb = new RFB(document.getElementById('screen'), wsUrl.href, { shared: true });
  rfb.viewOnly = readOnly;
  rfb.scaleViewport = true;
  rfb.resizeSession = false;
  rfb.focusOnClick = !readOnly;
  rfb.addEventListener('connect', () => {
    retries = 0;
    say('');
    if (!readOnly) rfb.focus();
    window.parent?.postMessage({ type: 'KERNEL_CONNECTED' }, '*');
  });
  rfb.addEventListener('disconnect', async () => {
    rfb = null;
    const state = await sessionState();
    if (state === 'ended') {
      say('This browser session has ended.');
      window.parent?.postMessage({ type: 'KERNEL_DISCONNECTED', reason: 'ended' }, '*');
      return;
    }
    say('Reconnecting…');
    setTimeout(connect, Math.min(5000, 250 * 2 ** retries++));
  });
}

// A paste into the viewer puts the text on the remote clipboard first, so Ctrl+V there pastes it.
let lastSent = null;
async function toRemoteClipboard(text) {
  if (readOnly || !text || text === lastSent) return;
  lastSent = text;
  await fetch(page + '/clipboard', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ text }),
  }).catch(() => {});
}
document.addEventListener('paste', (e) => toRemoteClipboard(e.clipboardData?.getData('text/plain')));
// A copy in the remote browser (Ctrl/Cmd+C or X in the viewer) comes back to this machine's
// clipboard where the browser lets the page write it. Capture phase: before noVNC takes the key.
window.addEventListener('keydown', (e) => {
  if (readOnly || !(e.ctrlKey || e.metaKey) || !['c', 'x'].includes(e.key.toLowerCase())) return;
  setTimeout(async () => {
    try {
      const r = await fetch(page + '/clipboard', { cache: 'no-store' });
      if (r.ok) {
        const { text } = await r.json();
        lastSent = text;
        await navigator.clipboard?.writeText(text);
      }
    } catch {
      // no permission to write the local clipboard
    }
  }, 300);
}, true);
window.addEventListener('focus', async () => {
  if (readOnly || !navigator.clipboard?.readText) return;
  try {
    await toRemoteClipboard(await navigator.clipboard.readText());
  } catch {
    // reading the clipboard needs a permission the embedding page may not grant
  }
});

connect();
</script>
</body>
</html>
)html";

// The live-view page of a headless session: the instance's CDP screencast (relayed by the agent,
// see screencast.hpp for the stream) drawn on a canvas scaled to fit, and mouse/keyboard input
// sent back as newline-delimited JSON, which the server drops for a read-only link.
inline constexpr std::string_view kScreencastHead =
    R"html(  #screen { position: absolute; inset: 0; display: flex; align-items: center; justify-content: center; }
  #screen canvas { outline: none; display: none; }
</style>
</head>
<body>
<div id="screen"><canvas tabindex="0"></canvas></div>
<div id="status">Connecting…</div>
<script type="module" nonce="{{nonce}}">
)html";
inline constexpr std::string_view kScreencastScript = R"html(
const canvas = document.querySelector('#screen canvas');
const ctx = canvas.getContext('2d');

let ws = null;
let retries = 0;
let size = { width: 0, height: 0 }; // the remote page in CSS pixels
let shown = false;

// The canvas has the remote page's size; its CSS size fits the window, aspect kept.
function fit() {
  if (!canvas.width || !canvas.height) return;
  const scale = Math.min(innerWidth / canvas.width, innerHeight / canvas.height);
  canvas.style.width = Math.floor(canvas.width * scale) + 'px';
  canvas.style.height = Math.floor(canvas.height * scale) + 'px';
}
// Frames no larger than this window shows them: Chromium's screencast costs about its pixels
// (JPEG encoding in the instance), and a viewer smaller than the page would throw most away.
// Read-only viewers ask too: it is no input.
function askFrameSize() {
  if (ws?.readyState !== WebSocket.OPEN) return;
  const dpr = devicePixelRatio || 1;
  ws.send(JSON.stringify({ type: 'view', width: Math.ceil(innerWidth * dpr), height: Math.ceil(innerHeight * dpr) }) + '\n');
}
let resizing = null;
addEventListener('resize', () => {
  fit();
  clearTimeout(resizing);
  resizing = setTimeout(askFrameSize, 200);
});

// Frames are decoded one at a time; one that arrives meanwhile replaces the waiting one.
let decoding = false;
let waiting = null;
async function draw(jpeg) {
  if (decoding) { waiting = jpeg; return; }
  decoding = true;
  try {
    const img = await createImageBitmap(new Blob([jpeg], { type: 'image/jpeg' }));
    const width = size.width || img.width;
    const height = size.height || img.height;
    if (canvas.width !== width || canvas.height !== height) {
      canvas.width = width;
      canvas.height = height;
      canvas.style.display = 'block';
      fit();
    }
    ctx.drawImage(img, 0, 0, width, height);
    canvas.dataset.frame = `${img.width}x${img.height}`; // what arrived, for whoever inspects the page
    img.close();
    if (!shown) {
      shown = true;
      retries = 0;
      say('');
      if (!readOnly) canvas.focus();
      window.parent?.postMessage({ type: 'KERNEL_CONNECTED' }, '*');
    }
  } catch {
    // a frame that does not decode is skipped
  }
  decoding = false;
  if (waiting) { const next = waiting; waiting = null; draw(next); }
}

// What was selected in the remote page when copy or cut was pressed, to this machine's clipboard
// where the browser lets the page write it.
async function copied(text) {
  try {
    if (text) await navigator.clipboard?.writeText(text);
  } catch {
    // no permission to write the local clipboard
  }
}

// The agent's byte stream: [u32 length][u8 kind][payload], kind 1 = JSON size, 2 = JPEG,
// 3 = JSON {text} after a copy.
let buf = new Uint8Array(1 << 20);
let len = 0;
function take(chunk) {
  const data = new Uint8Array(chunk);
  if (len + data.length > buf.length) {
    const bigger = new Uint8Array(Math.max(buf.length * 2, len + data.length));
    bigger.set(buf.subarray(0, len));
    buf = bigger;
  }
  buf.set(data, len);
  len += data.length;
  let at = 0;
  while (len - at >= 5) {
    const n = new DataView(buf.buffer, at, 4).getUint32(0);
    if (len - at < 4 + n) break;
    const kind = buf[at + 4];
    const payload = buf.slice(at + 5, at + 4 + n);
    if (kind === 1) size = JSON.parse(new TextDecoder().decode(payload));
    else if (kind === 2) draw(payload);
    else if (kind === 3) copied(JSON.parse(new TextDecoder().decode(payload)).text);
    at += 4 + n;
  }
  buf.copyWithin(0, at, len);
  len -= at;
}

function connect() {
  len = 0;
  shown = false;
  ws = new WebSocket(wsUrl.href);
  ws.binaryType = 'arraybuffer';
  ws.onmessage = (e) => take(e.data);
  ws.onopen = askFrameSize;
  ws.onclose = async () => {
    ws = null;
    const state = await sessionState();
    if (state === 'ended') {
      canvas.style.display = 'none';
      say('This browser session has ended.');
      window.parent?.postMessage({ type: 'KERNEL_DISCONNECTED', reason: 'ended' }, '*');
      return;
    }
    say('Reconnecting…');
    setTimeout(connect, Math.min(5000, 250 * 2 ** retries++));
  };
}

function send(event) {
  if (!readOnly && ws?.readyState === WebSocket.OPEN) ws.send(JSON.stringify(event) + '\n');
}
const modifiers = (e) => (e.altKey ? 1 : 0) | (e.ctrlKey ? 2 : 0) | (e.metaKey ? 4 : 0) | (e.shiftKey ? 8 : 0);
const buttonName = (b) => ['left', 'middle', 'right'][b] ?? 'none';
function point(e) {
  const r = canvas.getBoundingClientRect();
  return {
    x: Math.round(((e.clientX - r.left) / r.width) * (size.width || canvas.width)),
    y: Math.round(((e.clientY - r.top) / r.height) * (size.height || canvas.height)),
  };
}

if (!readOnly) {
  const mouse = (action) => (e) => {
    e.preventDefault();
    if (action === 'down') canvas.focus();
    send({ type: 'mouse', action, ...point(e), button: action === 'move' ? 'none' : buttonName(e.button),
           buttons: e.buttons, clickCount: action === 'move' ? 0 : e.detail || 1, modifiers: modifiers(e) });
  };
  canvas.addEventListener('mousemove', mouse('move'));
  canvas.addEventListener('mousedown', mouse('down'));
  canvas.addEventListener('mouseup', mouse('up'));
  canvas.addEventListener('contextmenu', (e) => e.preventDefault());
  canvas.addEventListener('wheel', (e) => {
    e.preventDefault();
    send({ type: 'mouse', action: 'wheel', ...point(e), deltaX: e.deltaX, deltaY: e.deltaY, modifiers: modifiers(e) });
  }, { passive: false });
  const key = (action) => (e) => {
    // Ctrl/Cmd+V stays local so the paste event below carries the text over.
    if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === 'v') return;
    e.preventDefault();
    // The selection is asked for before a cut removes it.
    if (action === 'down' && (e.ctrlKey || e.metaKey) && ['c', 'x'].includes(e.key.toLowerCase()))
      send({ type: 'copy' });
    const text = action === 'down' && !e.ctrlKey && !e.metaKey && !e.altKey
      ? (e.key.length === 1 ? e.key : e.key === 'Enter' ? '\r' : '') : '';
    send({ type: 'key', action, key: e.key, code: e.code, text, keyCode: e.keyCode, location: e.location,
           modifiers: modifiers(e) });
  };
  canvas.addEventListener('keydown', key('down'));
  canvas.addEventListener('keyup', key('up'));
  document.addEventListener('paste', (e) => {
    const text = e.clipboardData?.getData('text/plain');
    if (text) send({ type: 'text', text });
  });
}

connect();
</script>
</body>
</html>
)html";

inline const std::string &viewer_page() {
    static const std::string page =
        std::string(kPageTop) + std::string(kViewerHead) + std::string(kViewerPrelude) + std::string(kViewerScript);
    return page;
}

inline const std::string &screencast_page() {
    static const std::string page = std::string(kPageTop) + std::string(kScreencastHead) + std::string(kViewerPrelude) +
                                    std::string(kScreencastScript);
    return page;
}

inline constexpr std::string_view kEndedPage = R"html(<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Live view</title>
<style nonce="{{nonce}}">html, body { margin: 0; height: 100%; background: #202124; color: #e8eaed;
  font: 16px system-ui, sans-serif; display: flex; align-items: center; justify-content: center; }</style>
</head>
<body><p>This browser session has ended.</p></body>
</html>
)html";

} // namespace hangar::liveview
