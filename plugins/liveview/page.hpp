// The live-view page: a noVNC client filling the window. Served at /browser/live/{token}; its
// WebSocket is /browser/live/{token}/ws and noVNC itself comes from /liveview/novnc/ (Debian's
// novnc package), both found relative to the page so a path prefix in front of Hangar still works.
#pragma once

#include <string_view>

namespace hangar::liveview {

inline constexpr std::string_view kViewerPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>Live view</title>
<style>
  html, body { margin: 0; height: 100%; background: #202124; overflow: hidden; }
  #screen { position: absolute; inset: 0; }
  #status { position: absolute; inset: 0; display: flex; align-items: center; justify-content: center;
            color: #e8eaed; font: 16px system-ui, sans-serif; pointer-events: none; }
  #status.hidden { display: none; }
</style>
</head>
<body>
<div id="screen"></div>
<div id="status">Connecting…</div>
<script type="module">
import RFB from '../../liveview/novnc/core/rfb.js';

const params = new URLSearchParams(location.search);
const yes = (v) => v !== null && ['1', 'true', 'yes'].includes(v.toLowerCase());
const readOnly = ['readOnly', 'readonly', 'ro'].some((k) => yes(params.get(k)));
const page = location.pathname.replace(/\/+$/, '');
const wsUrl = new URL(page + '/ws' + (readOnly ? '?readOnly=true' : ''), location.href);
wsUrl.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
const statusBox = document.getElementById('status');
const say = (text) => { statusBox.textContent = text; statusBox.classList.toggle('hidden', !text); };

let rfb = null;
let retries = 0;

async function sessionState() {
  try {
    const r = await fetch(page + '/status', { cache: 'no-store' });
    if (r.ok) return (await r.json()).state;
    return r.status === 404 ? 'ended' : 'unknown';
  } catch {
    return 'unknown';
  }
}

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

inline constexpr std::string_view kEndedPage = R"html(<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Live view</title>
<style>html, body { margin: 0; height: 100%; background: #202124; color: #e8eaed;
  font: 16px system-ui, sans-serif; display: flex; align-items: center; justify-content: center; }</style>
</head>
<body><p>This browser session has ended.</p></body>
</html>
)html";

} // namespace hangar::liveview
