#include "engine.hpp"

#include <chrono>
#include <map>
#include <set>
#include <thread>

namespace managed_auth {

// Reports what a login page shows: visible inputs (with label, type, autocomplete, inputmode,
// maxlength), the submit button of their form, every visible clickable with its label (for MFA
// methods, SSO buttons, account pickers and "sign in" links) and the visible error text.
// Selectors prefer #id, then a unique [name], then an nth-of-type path.
const char *const kDiscoverScript = R"JS((() => {
  const vis = (el) => {
    if (!el || el.disabled) return false;
    const s = getComputedStyle(el);
    if (s.visibility === 'hidden' || s.display === 'none' || parseFloat(s.opacity) === 0) return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const sel = (el) => {
    if (el.id && document.querySelectorAll('#' + CSS.escape(el.id)).length === 1) return '#' + CSS.escape(el.id);
    const n = el.getAttribute('name');
    if (n) {
      const q = el.tagName.toLowerCase() + '[name="' + n.replace(/["\\]/g, '\\$&') + '"]';
      if (document.querySelectorAll(q).length === 1) return q;
    }
    const path = [];
    for (let e = el; e && e.nodeType === 1 && e !== document.body; e = e.parentElement) {
      let i = 1;
      for (let p = e.previousElementSibling; p; p = p.previousElementSibling) if (p.tagName === e.tagName) i++;
      path.unshift(e.tagName.toLowerCase() + ':nth-of-type(' + i + ')');
    }
    return 'body > ' + path.join(' > ');
  };
  const xpath = (el) => {
    const parts = [];
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      let i = 1;
      for (let p = e.previousElementSibling; p; p = p.previousElementSibling) if (p.tagName === e.tagName) i++;
      parts.unshift(e.tagName.toLowerCase() + '[' + i + ']');
    }
    return '/' + parts.join('/');
  };
  const text = (el) => (el.innerText || el.value || el.getAttribute('aria-label') || el.title || '').trim().replace(/\s+/g, ' ');
  const labelOf = (el) => {
    if (el.labels && el.labels.length) return el.labels[0].innerText.trim();
    const a = el.getAttribute('aria-label');
    if (a) return a;
    const by = el.getAttribute('aria-labelledby');
    if (by && document.getElementById(by)) return document.getElementById(by).innerText.trim();
    return el.placeholder || el.name || '';
  };
  // Help text: what aria-describedby names, else a hint element beside the input (in a container
  // holding no other input, so one field's hint is never another's).
  const described = (el) => (el.getAttribute('aria-describedby') || '').split(/\s+/).filter(Boolean)
    .map((id) => document.getElementById(id)).filter(Boolean).map((e) => (e.innerText || e.textContent || '').trim())
    .join(' '); // hidden text counts: the input names it for screen readers
  const hintSel = 'small, .hint, .help, .help-text, .helper-text, .description, [class*="hint"], [class*="help"], ' +
    '[id$="-help"], [id$="-hint"], [id$="_help"], [id$="_hint"]';
  const nearby = (el) => {
    for (let p = el.parentElement, depth = 0; p && p !== document.body && depth < 2; p = p.parentElement, depth++) {
      if (p.querySelectorAll('input:not([type=hidden]), textarea, select').length > 1) break;
      for (const h of p.querySelectorAll(hintSel)) {
        if (h.contains(el) || h.querySelector('input, textarea, select, button, a') || !vis(h)) continue;
        const t = (h.innerText || '').trim();
        if (t) return t.slice(0, 300);
      }
    }
    return '';
  };
  const skip = ['hidden', 'submit', 'button', 'checkbox', 'radio', 'image', 'reset', 'file', 'range', 'color'];
  const fields = [];
  for (const el of document.querySelectorAll('input, textarea')) {
    const t = (el.getAttribute('type') || 'text').toLowerCase();
    if (skip.includes(t) || !vis(el) || el.readOnly) continue;
    fields.push({ selector: sel(el), name: el.name || el.id || '', label: labelOf(el), type: t,
      autocomplete: el.getAttribute('autocomplete') || '', inputmode: el.getAttribute('inputmode') || '',
      placeholder: el.placeholder || '', maxlength: el.maxLength, required: !!el.required,
      described: described(el), nearby: nearby(el) });
  }

  let submit = '';
  const first = fields.length ? document.querySelector(fields[0].selector) : null;
  const form = first && first.closest('form');
  if (form) {
    const b = [...form.querySelectorAll('button, input[type=submit]')].filter(vis)
      .find((b) => (b.getAttribute('type') || 'submit').toLowerCase() === 'submit');
    if (b) submit = sel(b);
  }
  const buttons = [...document.querySelectorAll('button, input[type=submit], input[type=button], a, [role=button], [role=option]')]
    .filter(vis).map((el) => {
      // One innerText (a layout read) per clickable: its lines for the choice's display text,
      // collapsed for its label.
      const full = (el.innerText || el.value || el.getAttribute('aria-label') || el.title || '').trim();
      const label = full.replace(/\s+/g, ' ');
      return { selector: sel(el), xpath: xpath(el), label: label.slice(0, 160), full: full.slice(0, 300),
        account: el.getAttribute('data-account') || (el.getAttribute('role') === 'option' ? label : ''),
        in_login_form: !!(form && form.contains(el)) };
    });
  let error = '';
  for (const el of document.querySelectorAll('[role=alert], [aria-live=assertive], .error, .alert-danger, .error-message, .errors, #error, .flash-error')) {
    if (vis(el) && text(el)) { error = text(el).slice(0, 300); break; }
  }
  const body = document.body ? document.body.innerText.slice(0, 4000) : '';
  return { url: location.href, ready: document.readyState, fields, submit, buttons, error, text: body };
})())JS";

namespace {

// The prompt above each choice, by CSS selector: the nearest earlier sibling with text and no
// control, of the choice or of one of its containers ("How do you want to get your code?"). Read
// once when the flow asks, not in every discovery poll: it walks the page around each choice.
const char *const kChoiceContextScript = R"JS(((selectors) => {
  const vis = (el) => {
    const s = getComputedStyle(el);
    if (s.visibility === 'hidden' || s.display === 'none') return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const contextOf = (el) => {
    for (let e = el, depth = 0; e && e !== document.body && depth < 4; e = e.parentElement, depth++) {
      for (let p = e.previousElementSibling; p; p = p.previousElementSibling) {
        if (p.matches('script, style') || !vis(p) || p.querySelector('a, button, input, select, textarea')) continue;
        const t = (p.innerText || '').trim();
        if (t) return t.slice(0, 300);
      }
    }
    return '';
  };
  return selectors.map((s) => { const el = s && document.querySelector(s); return el ? contextOf(el) : ''; });
}))JS";

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Discovered {
    json raw;
    std::vector<PageField> fields;
    std::vector<Kind> kinds;
    bool login_form = false;
    json mfa = json::array();      // {type, label, selector}
    json sso = json::array();      // {provider, label, selector (xpath), css}
    json accounts = json::array(); // {id, label, selector}
    json login_links = json::array();
    std::string external_action; // the page asks for an approval elsewhere (a push to a phone)
};

PageField page_field(const json &f) {
    PageField p;
    p.selector = f.value("selector", "");
    p.name = f.value("name", "");
    p.label = f.value("label", "");
    p.html_type = f.value("type", "text");
    p.autocomplete = f.value("autocomplete", "");
    p.inputmode = f.value("inputmode", "");
    p.placeholder = f.value("placeholder", "");
    p.maxlength = f.value("maxlength", -1);
    p.required = f.value("required", false);
    p.described = f.value("described", "");
    p.nearby = f.value("nearby", "");
    return p;
}

bool is_login_kind(Kind k) {
    return k == Kind::Identifier || k == Kind::Password || k == Kind::Totp || k == Kind::Code;
}

Discovered analyse(const json &raw) {
    Discovered d;
    d.raw = raw;
    for (const auto &f : raw.value("fields", json::array())) {
        d.fields.push_back(page_field(f));
        d.kinds.push_back(classify(d.fields.back()));
        if (is_login_kind(d.kinds.back())) d.login_form = true;
    }
    int n = 0;
    for (const auto &b : raw.value("buttons", json::array())) {
        std::string label = b.value("label", "");
        if (label.empty()) continue;
        if (auto provider = sso_provider_of_label(label); !provider.empty()) {
            d.sso.push_back({{"provider", provider},
                             {"label", label},
                             {"selector", b.value("xpath", "")},
                             {"css", b.value("selector", "")},
                             {"full", b.value("full", "")}});
            continue;
        }
        if (!b.value("account", "").empty()) {
            d.accounts.push_back({{"id", "account-" + std::to_string(n++)},
                                  {"label", label},
                                  {"selector", b.value("selector", "")},
                                  {"full", b.value("full", "")}});
            continue;
        }
        if (auto type = mfa_type_of_label(label); !type.empty() && !b.value("in_login_form", false)) {
            d.mfa.push_back({{"type", type},
                             {"label", label},
                             {"selector", b.value("selector", "")},
                             {"full", b.value("full", "")}});
            continue;
        }
        static const std::vector<std::string> login_words = {"sign in", "log in", "login", "signin"};
        std::string lower;
        for (char c : label)
            lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
        for (const auto &w : login_words)
            if (lower == w || lower.starts_with(w + " ") || lower.ends_with(" " + w)) {
                d.login_links.push_back(b.value("selector", ""));
                break;
            }
    }
    if (!d.login_form && d.mfa.empty() && d.sso.empty() && d.accounts.empty())
        d.external_action = external_action_prompt(raw.value("text", ""));
    return d;
}

// A page's state that changes when a submit did something: URL, inputs, error text.
std::string signature(const json &raw) {
    std::string s = raw.value("url", "") + "|" + raw.value("error", "");
    for (const auto &f : raw.value("fields", json::array()))
        s += "|" + f.value("selector", "");
    return s;
}

class Engine {
public:
    Engine(Page &page, FlowHost &host, const EngineSettings &settings) : page_(page), host_(host), s_(settings) {}

    Outcome run() {
        values_ = host_.credential_values(false);
        host_.publish({{"flow_step", "DISCOVERING"}});
        page_.navigate(s_.start_url);
        settle("");
        Outcome out;
        bool acted = false; // something was submitted or clicked
        // This page answers what the flow just submitted or clicked: an error on it is the site's
        // verdict. A page read again after asking the user still shows that old error.
        bool answered = false;
        bool last_totp = false; // the last submit carried a stored-secret TOTP code
        bool totp_retried = false;
        bool user_supplied = false; // the last submit used values the user typed
        std::string last_sig;
        int repeats = 0;
        for (int step = 0; step < s_.max_steps; ++step) {
            host_.check();
            Discovered d = discover();
            if (!blocked(d, out)) return out;
            std::string error = d.raw.value("error", "");
            if (!d.login_form && d.mfa.empty() && d.sso.empty() && d.accounts.empty()) {
                if (acted && !d.external_action.empty()) { // approve on the phone, then go on
                    if (!await_external_action(d, out)) return out;
                    answered = true;
                    continue;
                }
                if (!acted && !d.login_links.empty()) { // a home page: open its sign-in page
                    click(d.login_links.front().get<std::string>());
                    acted = true;
                    continue;
                }
                return verify(out);
            }
            bool verdict = answered;
            answered = false;
            if (verdict && !error.empty() && d.login_form) {
                if (last_totp && !totp_retried) { // the code may have rolled over: one fresh code
                    totp_retried = true;
                    values_ = host_.credential_values(true);
                } else if (user_supplied) {
                    // The site refused what the user typed: those fields are asked again, as
                    // rejected (0.131's reason), with the site's words.
                    host_.publish({{"website_error", error}});
                    rejected_ = last_user_fields_;
                    user_.clear();
                } else {
                    out.error_code = "credentials_invalid";
                    out.error_message = "the site refused the login";
                    out.website_error = error;
                    return out;
                }
            }
            std::string sig = signature(d.raw);
            if (sig == last_sig && error.empty() && ++repeats >= 2) {
                out.error_code = "login_stalled";
                out.error_message = "the login page did not change after submitting it";
                return out;
            }
            last_sig = sig;

            if (!d.login_form) { // a choice: MFA method, SSO provider or account
                if (!choose(d)) continue;
                acted = answered = true;
                continue;
            }
            json plan_step = {{"url", d.raw.value("url", "")}, {"fields", json::array()}};
            std::vector<std::pair<std::string, std::string>> fills;
            json missing = json::array(), missing_canonical = json::array();
            last_totp = false;
            user_supplied = false;
            last_user_fields_.clear();
            for (std::size_t i = 0; i < d.fields.size(); ++i) {
                const PageField &f = d.fields[i];
                Kind k = d.kinds[i];
                plan_step["fields"].push_back({{"selector", f.selector}, {"kind", field_type(k)}});
                if (k == Kind::Code) { // a code sent to the user: a re-auth cannot read it
                    plan_["needs_code"] = true;
                    plan_["code_channel"] = code_channel(f);
                }
                auto v = value_for(k, f);
                if (v) {
                    fills.emplace_back(f.selector, v->first);
                    if (k == Kind::Totp) {
                        last_totp = !v->second;
                        plan_["totp"] = v->second ? "user" : "secret";
                    }
                    if (v->second) last_user_fields_.insert(f.selector);
                    user_supplied = user_supplied || v->second;
                    continue;
                }
                if (k == Kind::Text && !f.required) continue;
                std::string hint = field_hint(k, f.described, f.nearby, d.raw.value("text", ""));
                json df = {{"name", f.name.empty() ? field_id(k, f) : f.name},
                           {"label", f.label.empty() ? f.name : f.label},
                           {"selector", f.selector},
                           {"type", discovered_type(k, f)},
                           {"required", true}};
                if (!f.placeholder.empty()) df["placeholder"] = f.placeholder;
                if (!hint.empty()) df["hint"] = hint;
                if (k == Kind::Totp) df["linked_mfa_type"] = "totp";
                if (k == Kind::Code) df["linked_mfa_type"] = code_channel(f);
                missing.push_back(df);
                json field = {{"id", field_id(k, f)},
                              {"ref", field_ref(k, f)},
                              {"type", field_type(k)},
                              {"label", f.label.empty() ? f.name : f.label},
                              {"observed_selector", f.selector},
                              {"required", true},
                              {"input_mode", input_mode(f)},
                              // Asked again because the site refused what the user typed into
                              // it, else because no value is known for it.
                              {"reason", rejected_.count(f.selector) ? "rejected" : "missing"}};
                if (!hint.empty()) field["hint"] = hint;
                missing_canonical.push_back(field);
            }
            if (!missing.empty()) {
                ask({{"discovered_fields", missing}, {"fields", missing_canonical}});
                rejected_.clear();
                continue; // rediscover: the page may have changed meanwhile
            }
            for (const auto &[selector, value] : fills)
                page_.fill(selector, value);
            host_.publish({{"flow_step", "SUBMITTING"}, {"discovered_fields", nullptr}, {"fields", nullptr}});
            plan_step["submit"] = d.raw.value("submit", "");
            plan_["steps"].push_back(plan_step);
            std::string before = signature(d.raw);
            submit(d);
            acted = answered = true;
            settle(before);
        }
        out.error_code = "login_stalled";
        out.error_message = "the login did not finish within " + std::to_string(s_.max_steps) + " steps";
        return out;
    }

private:
    Discovered discover() {
        for (int attempt = 0;; ++attempt) {
            try {
                json raw = page_.eval(kDiscoverScript);
                if (raw.is_object()) return analyse(raw);
            } catch (const FlowEnded &) {
                throw;
            } catch (const std::exception &) {
                if (attempt >= 10) throw; // a navigation tore the context down: try again shortly
            }
            std::this_thread::sleep_for(200ms);
        }
    }

    // AWAITING_EXTERNAL_ACTION with the page's own words until the page moves on (the user
    // approved on their device), within external_action_timeout_ms; false (with `out` filled)
    // when it never does. Re-auth cannot do this alone, so the plan records it.
    bool await_external_action(const Discovered &d, Outcome &out) {
        plan_["needs_external_action"] = true;
        host_.publish({{"flow_step", "AWAITING_EXTERNAL_ACTION"}, {"external_action_message", d.external_action}});
        std::string before = signature(d.raw);
        auto deadline = Clock::now() + std::chrono::milliseconds(s_.external_action_timeout_ms);
        while (Clock::now() < deadline) {
            host_.check();
            std::this_thread::sleep_for(250ms);
            try {
                json raw = page_.eval(kDiscoverScript);
                if (!raw.is_object() || signature(raw) == before) continue;
            } catch (const FlowEnded &) {
                throw;
            } catch (const std::exception &) {
                // navigating away: the approval came
            }
            settle(before);
            host_.publish({{"flow_step", "SUBMITTING"}, {"external_action_message", nullptr}});
            return true;
        }
        out.error_code = "external_action_timeout";
        out.error_message = "the sign-in was not approved on the other device in time";
        return false;
    }

    // False (with `out` filled) when the page left the domains the flow may visit.
    bool blocked(const Discovered &d, Outcome &out) const {
        std::string host = url_host(d.raw.value("url", ""));
        if (host.empty() || host_allowed(host, s_.domain, s_.allowed_domains)) return true;
        out.error_code = "navigation_blocked";
        out.error_message = "the login went to " + host + ", which is neither " + s_.domain +
                            " nor in allowed_domains; add it to allowed_domains to allow it";
        return false;
    }

    // Waits until the page differs from `before` (URL, inputs or error text) and has loaded,
    // or until the settle timeout passes.
    void settle(const std::string &before) {
        auto deadline = Clock::now() + std::chrono::milliseconds(s_.settle_timeout_ms);
        std::string last;
        int stable = 0;
        while (Clock::now() < deadline) {
            host_.check();
            try {
                json raw = page_.eval(kDiscoverScript);
                std::string sig = raw.is_object() ? signature(raw) : "";
                bool loaded = raw.is_object() && raw.value("ready", "") == "complete";
                if (loaded && sig != before) {
                    if (sig == last && ++stable >= 2) return;
                    if (sig != last) stable = 0;
                    last = sig;
                }
            } catch (const FlowEnded &) {
                throw;
            } catch (const std::exception &) {
                // navigating: the next poll sees the new document
            }
            std::this_thread::sleep_for(75ms);
        }
    }

    // The value for one input: what the user submitted, else the stored credential. The flag
    // says it came from the user.
    std::optional<std::pair<std::string, bool>> value_for(Kind k, const PageField &f) const {
        for (const std::string &key : {field_id(k, f), f.name, f.selector, field_ref(k, f)}) {
            if (key.empty()) continue;
            if (auto it = user_.find(key); it != user_.end()) return std::pair{it->second, true};
        }
        if (auto v = credential_value(values_, k, f)) return std::pair{*v, false};
        return std::nullopt;
    }

    static std::string code_channel(const PageField &f) {
        std::string t = mfa_type_of_label(f.label + " " + f.placeholder);
        return t == "email" || t == "call" ? t : "sms";
    }

    void ask(const json &what) {
        Submit in = host_.await_input(what);
        if (in.what == Submit::What::Fields || in.what == Submit::What::FieldValues) {
            for (const auto &[k, v] : in.values.items())
                user_[k] = v.get<std::string>();
            // Values typed for an identifier or password may be saved; codes never are.
            for (const auto &f : what.value("fields", json::array())) {
                std::string id = f.value("id", ""), ref = f.value("ref", ""), type = f.value("type", "");
                std::string name;
                for (const auto &df : what.value("discovered_fields", json::array()))
                    if (df.value("selector", "") == f.value("observed_selector", "")) name = df.value("name", "");
                std::string value;
                if (user_.count(id))
                    value = user_[id];
                else if (!name.empty() && user_.count(name))
                    value = user_[name];
                if (!value.empty() && (type == "identifier" || type == "password" || type == "text"))
                    learned_[ref] = value;
            }
        } else {
            pending_choice_ = in.choice;
        }
        host_.publish({{"flow_step", "SUBMITTING"}, {"interaction_id", nullptr}});
    }

    // Picks an MFA method (the authenticator when a TOTP secret is stored), an SSO provider or an
    // account: on its own when the stored values decide it, else by asking. True when clicked.
    bool choose(const Discovered &d) {
        if (std::string want = host_.credential_sso_provider(); !want.empty())
            for (const auto &s : d.sso)
                if (s.value("provider", "") == want) {
                    host_.publish({{"sso_provider", want}});
                    click(s.value("css", ""));
                    return true;
                }
        if (!d.mfa.empty() && values_.contains("totp_code"))
            for (const auto &m : d.mfa)
                if (m.value("type", "") == "totp") {
                    click(m.value("selector", ""));
                    return true;
                }
        json choices = json::array(), mfa = json::array(), sso = json::array(), accounts = json::array();
        std::map<std::string, std::string> context = choice_contexts(d);
        // 0.131's Choice details: what the choice element shows and the prompt above the group.
        auto choice = [&context](const json &seen, const std::string &id, const char *type) {
            const std::string css = seen.value(seen.contains("css") ? "css" : "selector", "");
            ChoiceDetails cd = choice_details(seen.value("full", seen.value("label", "")), context[css]);
            json c = {{"id", id}, {"label", seen.value("label", "")}, {"type", type}, {"observed_selector", css}};
            if (std::string(type) == "mfa_method") c["mfa_type"] = seen.value("type", "");
            if (!cd.masked_destination.empty()) c["masked_destination"] = cd.masked_destination;
            if (!cd.display_text.empty()) c["display_text"] = cd.display_text;
            if (!cd.context.empty()) c["context"] = cd.context;
            return c;
        };
        for (const auto &m : d.mfa) {
            json c = choice(m, m.value("type", ""), "mfa_method");
            choices.push_back(c);
            json option = {{"type", m.value("type", "")}, {"label", m.value("label", "")}};
            if (c.contains("masked_destination")) option["target"] = c["masked_destination"];
            mfa.push_back(option);
        }
        for (const auto &s : d.sso) {
            choices.push_back(choice(s, s.value("provider", ""), "sso_provider"));
            sso.push_back({{"provider", s.value("provider", "")},
                           {"label", s.value("label", "")},
                           {"selector", s.value("selector", "")}});
        }
        for (const auto &a : d.accounts) {
            choices.push_back(choice(a, a.value("id", ""), "account"));
            accounts.push_back({{"id", a.value("id", "")}, {"label", a.value("label", "")}});
        }
        // A re-auth would wait here for someone to choose.
        plan_["needs_customer_input"] = true;
        pending_choice_.clear();
        ask({{"choices", choices},
             {"mfa_options", mfa.empty() ? json() : mfa},
             {"pending_sso_buttons", sso.empty() ? json() : sso},
             {"sign_in_options", accounts.empty() ? json() : accounts}});
        for (const auto &c : choices)
            if (c.value("id", "") == pending_choice_ || c.value("observed_selector", "") == pending_choice_) {
                if (c.value("type", "") == "sso_provider") host_.publish({{"sso_provider", c.value("id", "")}});
                click(c.value("observed_selector", ""));
                return true;
            }
        for (const auto &s : d.sso)
            if (s.value("selector", "") == pending_choice_) {
                host_.publish({{"sso_provider", s.value("provider", "")}});
                click(s.value("css", ""));
                return true;
            }
        host_.publish({{"website_error", "the choice \"" + pending_choice_ + "\" is not offered on this page"}});
        return false;
    }

    // The prompt above each choice the page offers, by its CSS selector; none when the page went
    // away meanwhile (the details are help for the user, never a reason to fail the flow).
    std::map<std::string, std::string> choice_contexts(const Discovered &d) {
        json selectors = json::array();
        for (const json *list : {&d.mfa, &d.accounts})
            for (const auto &c : *list)
                selectors.push_back(c.value("selector", ""));
        for (const auto &c : d.sso)
            selectors.push_back(c.value("css", ""));
        std::map<std::string, std::string> out;
        try {
            json found = page_.eval(std::string(kChoiceContextScript) + "(" + selectors.dump() + ")");
            for (std::size_t i = 0; found.is_array() && i < found.size() && i < selectors.size(); ++i)
                if (found[i].is_string()) out[selectors[i].get<std::string>()] = found[i].get<std::string>();
        } catch (const FlowEnded &) {
            throw;
        } catch (const std::exception &) {
        }
        return out;
    }

    void click(const std::string &selector) {
        std::string before;
        try {
            before = signature(page_.eval(kDiscoverScript));
        } catch (const std::exception &) {
        }
        page_.eval("(() => { const el = document.querySelector(" + json(selector).dump() +
                   "); if (el) el.click(); return !!el; })()");
        settle(before);
    }

    void submit(const Discovered &d) {
        std::string button = d.raw.value("submit", "");
        std::string first = d.fields.empty() ? std::string() : d.fields.front().selector;
        // The form's own submit button, as a user would press it; else submit the form.
        page_.eval("(() => { const b = " + json(button).dump() + " && document.querySelector(" + json(button).dump() +
                   "); if (b) { b.click(); return 'button'; } const f = document.querySelector(" + json(first).dump() +
                   "); const form = f && f.closest('form'); if (form) { form.requestSubmit ? form.requestSubmit() : "
                   "form.submit(); return 'form'; } return 'none'; })()");
    }

    // The form is gone: reload and look again, so a login that did not stick is not a success.
    Outcome verify(Outcome out) {
        host_.publish({{"flow_step", "SUBMITTING"}});
        std::string url = page_.eval("location.href").get<std::string>();
        page_.reload();
        settle("");
        Discovered d = discover();
        if (d.login_form) {
            out.error_code = "login_not_persisted";
            out.error_message = "the site showed its login form again after a reload";
            out.website_error = d.raw.value("error", "");
            return out;
        }
        out.success = true;
        out.post_login_url = d.raw.value("url", url);
        out.plan = plan_;
        out.learned = learned_;
        return out;
    }

    Page &page_;
    FlowHost &host_;
    const EngineSettings &s_;
    json values_ = json::object();
    std::map<std::string, std::string> user_;
    std::set<std::string> last_user_fields_; // selectors the last submit filled with what the user typed
    std::set<std::string> rejected_;         // of those, the ones the site refused: asked as rejected
    std::string pending_choice_;
    json plan_ = {{"steps", json::array()}};
    json learned_ = json::object();
};

} // namespace

bool shows_login_form(const json &discovery) {
    return analyse(discovery).login_form;
}

Outcome run_login(Page &page, FlowHost &host, const EngineSettings &settings) {
    return Engine(page, host, settings).run();
}

} // namespace managed_auth
