// Hangar's request signer (plugins/proxies/README.md, "Request signing"). The agent signs every
// request through CDP Fetch interception, which never pauses a WebSocket handshake; this
// extension signs those, as Kernel's web-bot-auth extension does, through blocking webRequest
// (Manifest V3 grants it to policy-installed extensions only). It holds no key in its files: the
// agent hands it one over its own DevTools connection, sealed to a key pair made here, and the
// signature base comes with it (signing.hpp's template, the same text the agent signs).
importScripts('nacl-fast.min.js');

const HANDOFF = 'http://signer.hangar.invalid/key';
// Every 50 ms: the create waits for this hand-off (PUT /proxies/signing answers once it is
// done), and an ask made before the agent intercepts fails inside Chromium (*.hangar.invalid
// never leaves it), so asking often costs nothing. 30 s in all.
const HANDOFF_TRIES = 600;
let signer = null;

const b64 = (bytes) => btoa(String.fromCharCode(...bytes));
const unb64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
const b64url = (bytes) => b64(bytes).replaceAll('+', '-').replaceAll('/', '_').replaceAll('=', '');

function take(k) {
  signer = { ...k, secret: unb64(k.secret_key) };
}

// The agent answers once per instance, sealed to `keys.publicKey`; a second ask gets 410.
async function handoff() {
  const keys = nacl.box.keyPair();
  for (let i = 0; i < HANDOFF_TRIES; i++) {
    try {
      const res = await fetch(`${HANDOFF}?pk=${b64url(keys.publicKey)}`, { cache: 'no-store' });
      if (res.status === 410) return;
      if (res.ok) {
        const m = await res.json();
        const opened = nacl.box.open(unb64(m.box), unb64(m.nonce), unb64(m.epk), keys.secretKey);
        if (!opened) return;
        const k = JSON.parse(new TextDecoder().decode(opened));
        take(k);
        // Survives this worker being stopped and woken; gone with the browser.
        await chrome.storage.session.set({ k });
        return;
      }
    } catch {
      // Interception is not on yet.
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

function fill(text, v) {
  return text
    .replaceAll('{authority}', v.authority)
    .replaceAll('{created}', v.created)
    .replaceAll('{expires}', v.expires)
    .replaceAll('{nonce}', v.nonce);
}

function signatureHeaders(url) {
  const created = Math.floor(Date.now() / 1000);
  // URL.host: lower-case host and a non-default port (ws 80, wss 443), as RFC 9421 @authority.
  const v = {
    authority: new URL(url).host,
    created: String(created),
    expires: String(created + signer.ttl_seconds),
    nonce: b64(nacl.randomBytes(64)),
  };
  const signature = nacl.sign.detached(new TextEncoder().encode(fill(signer.base, v)), signer.secret);
  return [
    { name: 'Signature-Agent', value: signer.signature_agent },
    { name: 'Signature-Input', value: fill(signer.signature_input, v) },
    { name: 'Signature', value: `${signer.signature_prefix}${b64(signature)}:` },
  ];
}

const OURS = new Set(['signature', 'signature-agent', 'signature-input']);
chrome.webRequest.onBeforeSendHeaders.addListener(
  (details) => {
    if (!signer) return {};
    const headers = details.requestHeaders.filter((h) => !OURS.has(h.name.toLowerCase()));
    headers.push(...signatureHeaders(details.url));
    return { requestHeaders: headers };
  },
  { urls: ['ws://*/*', 'wss://*/*'], types: ['websocket'] },
  ['blocking', 'requestHeaders', 'extraHeaders'],
);

// Registered so Chromium starts this worker with the browser, before any page runs.
chrome.runtime.onStartup.addListener(() => {});
chrome.runtime.onInstalled.addListener(() => {});
// An extension API call every 20 s keeps the worker (and the key in its memory) alive.
setInterval(() => chrome.runtime.getPlatformInfo(), 20000);

chrome.storage.session.get('k').then(({ k }) => (k ? take(k) : handoff()));
