// The hosted login page (`hosted_url`): plain HTML and JavaScript, no build step. It exchanges
// the handoff code for a flow JWT, polls the connection with it about once a second, shows what
// the flow asks for (fields, choices, the site's error, the live view), posts the answers to
// submit, and on the end redirects to success_url / error_url with the documented parameters.
// 401 and 410 both read as "session expired" (kernel-behaviour.md §16.3). Served under the
// strict page policy (hangar/web.hpp): the style and script carry the answer's nonce, and the
// server has already refused a success_url / error_url that is not an allowed http(s) origin;
// the script checks the scheme once more before it follows one.
#pragma once

namespace managed_auth {

inline constexpr const char *kHostedPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Sign in</title>
<style nonce="{{nonce}}">
body{font:15px/1.5 system-ui,sans-serif;max-width:560px;margin:40px auto;padding:0 16px;color:#222}
h1{font-size:20px} .muted{color:#666} .error{color:#b00020;margin:8px 0} label{display:block;margin-top:10px}
input{width:100%;padding:8px;box-sizing:border-box;font:inherit} button{margin-top:12px;padding:8px 14px;font:inherit;cursor:pointer}
.choices button{display:block;width:100%;text-align:left} iframe{width:100%;height:360px;border:1px solid #ccc;margin-top:16px}
</style></head>
<body>
<h1 id="title">Signing in…</h1>
<p id="status" class="muted">Starting.</p>
<div id="website_error" class="error" role="alert" hidden></div>
<form id="form" hidden></form>
<div id="choices" class="choices" hidden></div>
<div id="live" hidden><p class="muted">The browser signing in:</p><iframe id="live_frame" title="live view"></iframe></div>
<script nonce="{{nonce}}">
(() => {
  const params = new URLSearchParams(location.search);
  const id = location.pathname.split('/').slice(-2)[0];
  const base = location.pathname.replace(/\/auth\/connections\/[^/]+\/hosted$/, '');
  const api = (p) => base + '/auth/connections/' + encodeURIComponent(id) + p;
  const $ = (x) => document.getElementById(x);
  let jwt = null, timer = null, shown = '';
  const show = (el, on) => { $(el).hidden = !on; };
  const redirect = (url, extra) => {
    if (!url) return;
    const u = new URL(url, location.href);
    if (u.protocol !== 'https:' && u.protocol !== 'http:') return;
    for (const [k, v] of Object.entries(extra)) u.searchParams.set(k, v);
    location.assign(u.toString());
  };
  const expired = (code, message) => {
    clearInterval(timer);
    $('title').textContent = 'This sign-in session has expired';
    $('status').textContent = message || 'Start the login again.';
    $('status').dataset.code = code || 'expired';
    show('form', false); show('choices', false);
    redirect(params.get('error_url'), { code: code || 'expired', message: message || 'session expired' });
  };
  const call = async (method, path, body) => {
    const r = await fetch(api(path), { method, headers: Object.assign({ 'content-type': 'application/json' },
      jwt ? { authorization: 'Bearer ' + jwt } : {}), body: body ? JSON.stringify(body) : undefined });
    let data = null; try { data = await r.json(); } catch (e) {}
    if (r.status === 401 || r.status === 410) { expired(data && data.code, data && data.message); throw new Error('expired'); }
    if (!r.ok) throw new Error((data && data.message) || ('HTTP ' + r.status));
    return data;
  };
  const submit = async (body) => {
    show('form', false); show('choices', false); shown = ''; $('form').innerHTML = '';
    $('status').textContent = 'Submitting…';
    try { await call('POST', '/submit', body); } catch (e) { if (e.message !== 'expired') $('status').textContent = e.message; }
  };
  const render = (c) => {
    $('title').textContent = 'Sign in to ' + c.domain;
    const err = c.website_error || (c.flow_status === 'FAILED' ? c.error_message : '');
    $('website_error').textContent = err || ''; show('website_error', !!err);
    if (c.live_view_url && $('live_frame').src !== c.live_view_url) { $('live_frame').src = c.live_view_url; show('live', true); }
    if (c.flow_status === 'SUCCESS') {
      clearInterval(timer); $('status').textContent = 'Signed in.'; show('live', false);
      return redirect(params.get('success_url'), { profile_name: c.profile_name, domain: c.domain });
    }
    if (['FAILED', 'CANCELED', 'EXPIRED'].includes(c.flow_status)) {
      clearInterval(timer); $('status').textContent = 'Sign-in ' + c.flow_status.toLowerCase() + '.'; show('live', false);
      return redirect(params.get('error_url'), { code: c.error_code || c.flow_status.toLowerCase(), message: c.error_message || c.flow_status });
    }
    const key = c.flow_step + JSON.stringify(c.fields || c.discovered_fields) + JSON.stringify(c.choices);
    if (c.flow_step !== 'AWAITING_INPUT') { $('status').textContent = c.flow_step === 'AWAITING_EXTERNAL_ACTION' ? (c.external_action_message || 'Approve the sign-in on your device.') : 'Working…'; show('form', false); show('choices', false); shown = ''; return; }
    if (key === shown) return;
    shown = key;
    $('status').textContent = 'The site needs more from you.';
    const fields = c.fields || [];
    if (fields.length) {
      // The fields can change under the user (the flow learns more of the page): what was typed
      // into a field that stays is kept, or a poll would wipe it between two keystrokes.
      const form = $('form'); const typed = {};
      for (const i of form.querySelectorAll('input')) typed[i.name] = i.value;
      form.innerHTML = '';
      for (const f of fields) {
        const d = (c.discovered_fields || []).find((x) => x.selector === f.observed_selector) || {};
        const label = document.createElement('label'); label.textContent = f.label || d.label || f.id;
        const input = document.createElement('input'); input.name = f.id;
        input.type = f.type === 'password' ? 'password' : 'text'; input.value = typed[f.id] || '';
        if (f.type === 'code' || f.type === 'totp_code') input.autocomplete = 'one-time-code';
        input.inputMode = f.input_mode || 'text';
        label.appendChild(input); form.appendChild(label);
        // The site's own help (where a code went), as text: never markup from the site.
        if (f.hint) { const h = document.createElement('small'); h.className = 'muted'; h.textContent = f.hint; form.appendChild(h); }
      }
      const b = document.createElement('button'); b.type = 'submit'; b.textContent = 'Continue'; form.appendChild(b);
      // interaction_id: the answer is for this pause; a newer one refuses it (409) rather than take it.
      form.onsubmit = (e) => { e.preventDefault(); const v = {}; for (const i of form.querySelectorAll('input')) v[i.name] = i.value; submit({ field_values: v, interaction_id: c.interaction_id || undefined }); };
      show('form', true); show('choices', false);
    } else if ((c.choices || []).length) {
      const box = $('choices'); box.innerHTML = '';
      for (const ch of c.choices) {
        const b = document.createElement('button'); b.textContent = ch.label; b.dataset.choice = ch.id;
        b.onclick = () => submit({ selected_choice_id: ch.id, interaction_id: c.interaction_id || undefined }); box.appendChild(b);
      }
      show('choices', true); show('form', false);
    }
  };
  const poll = async () => { try { render(await call('GET', '')); } catch (e) { if (e.message !== 'expired') $('status').textContent = e.message; } };
  (async () => {
    const code = params.get('code') || new URLSearchParams(location.hash.slice(1)).get('code');
    if (!code) return expired('missing_handoff_code', 'This link has no handoff code.');
    try { jwt = (await call('POST', '/exchange', { code })).jwt; } catch (e) { if (e.message !== 'expired') $('status').textContent = e.message; return; }
    history.replaceState(null, '', location.pathname + '?' + [...params].filter(([k]) => k !== 'code').map(([k, v]) => k + '=' + encodeURIComponent(v)).join('&'));
    await poll();
    timer = setInterval(poll, 1000);
  })();
})();
</script>
</body></html>)HTML";

} // namespace managed_auth
