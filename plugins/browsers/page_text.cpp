// A page's readable text through this instance's Chromium, for the search plugin's contents.
//
// render: a hidden tab loads the URL (Chromium follows redirects; the main document's response
// gives the final URL, status and type), then the extractor runs in that page. curl: the curl
// machinery fetches it (curl.cpp), and the extractor runs on the answer parsed by DOMParser in a
// blank hidden tab. Either way the page is fetched and parsed by Chromium inside the sandbox; what
// leaves is at most `max_chars` characters of text.
#include "page_text.hpp"
#include "hidden_tab.hpp"

#include <hangar/cdp.hpp>

#include "readability_js.hpp"

#include <algorithm>

namespace hangar::browsers {

namespace {

using cdp::Clock;

// The readable part of a document as text or small markdown. Mozilla Readability (when compiled
// in) picks the article; without one (or without Readability) the <article> (else <main>, else the
// body) stands in. Either way a DOM walk writes it out without scripts, navigation, headers,
// footers, asides and forms; headings, paragraphs, list items, links and preformatted blocks kept.
// A walk rather than innerText, so a DOMParser document (curl mode, no layout) reads the same.
constexpr const char *kExtract = R"JS(((doc, format, limit, Readability, version) => {
  let root = null, readable = false, used = 'innertext-1', title = '';
  if (Readability) {
    try {
      const article = new Readability(doc.cloneNode(true)).parse();
      if (article && article.content) {
        root = new DOMParser().parseFromString(article.content, 'text/html').body;
        readable = true;
        used = version;
        title = (article.title || '').trim();
      }
    } catch (e) {}
  }
  if (!root) {
    const pick = doc.querySelector('article') || doc.querySelector('main, [role=main]');
    root = pick || doc.body || doc.documentElement;
    readable = !!pick;
  }
  if (!root) return {text: '', chars: 0, readable: false, extractor: used};
  const c = root.cloneNode(true);
  c.querySelectorAll('script, style, noscript, template, nav, header, footer, aside, form, iframe, svg, ' +
    'button, [role=navigation], [role=banner], [role=contentinfo], [aria-hidden=true], [hidden]')
    .forEach(e => e.remove());
  const md = format === 'markdown';
  const block = new Set(['P', 'DIV', 'SECTION', 'ARTICLE', 'MAIN', 'UL', 'OL', 'TABLE', 'TR', 'BLOCKQUOTE',
    'FIGURE', 'DL', 'DT', 'DD', 'H1', 'H2', 'H3', 'H4', 'H5', 'H6', 'LI', 'PRE', 'HR', 'BODY']);
  const walk = (n) => {
    if (n.nodeType === 3) return n.nodeValue.replace(/\s+/g, ' ');
    if (n.nodeType !== 1) return '';
    const tag = n.tagName;
    if (tag === 'BR') return '\n';
    if (tag === 'PRE') return '\n\n' + (md ? '```\n' + n.textContent + '\n```' : n.textContent) + '\n\n';
    let inner = '';
    for (const k of n.childNodes) inner += walk(k);
    if (/^H[1-6]$/.test(tag)) return '\n\n' + (md ? '#'.repeat(+tag[1]) + ' ' : '') + inner.trim() + '\n\n';
    if (tag === 'LI') return '\n' + (md ? '- ' : '') + inner.trim() + '\n';
    if (tag === 'A' && md) {
      const href = n.getAttribute('href') || '';
      let abs = '';
      try { abs = new URL(href, doc.baseURI).href; } catch (e) {}
      return /^https?:/.test(abs) && inner.trim() ? '[' + inner.trim() + '](' + abs + ')' : inner;
    }
    return block.has(tag) ? '\n\n' + inner + '\n\n' : inner;
  };
  let text = walk(c).split('\n').map(l => l.trim()).join('\n').replace(/\n{3,}/g, '\n\n').trim();
  // Readability takes the title out of the content: it goes back on top.
  if (title && !text.startsWith(title) && !text.startsWith('# ' + title)) text = (md ? '# ' : '') + title + '\n\n' + text;
  return {text: text.slice(0, limit), chars: text.length, readable, extractor: used};
}))JS";

// Runs the extractor on `document_expr` in the tab; fills text, text_chars, readable.
void extract(HiddenTab &tab, const std::string &document_expr, const PageTextRequest &r, Clock::time_point deadline,
             json &out) {
    const std::string readability = *kReadabilityJs != '\0'
                                        ? "(() => {" + std::string(kReadabilityJs) + "\nreturn Readability; })()"
                                        : std::string("null");
    const std::string expr = std::string(kExtract) + "(" + document_expr + ", " + json(r.format).dump() + ", " +
                             std::to_string(r.max_chars) + ", " + readability + ", " +
                             json(kReadabilityVersion).dump() + ")";
    json got =
        tab.conn.call_until("Runtime.evaluate", {{"expression", expr}, {"returnByValue", true}}, tab.session, deadline);
    const json value = got.value("result", json::object()).value("value", json());
    if (!value.is_object() || !value.value("text", json()).is_string()) {
        out["extraction_error"] =
            got.contains("exceptionDetails") ? "the extractor failed in the page" : "the extractor returned nothing";
        return;
    }
    // The page's scripts share the extractor's globals and could undo its cut: cut again here, by
    // code points, so what leaves the sandbox is bounded whatever the page did.
    std::string text = value["text"].get<std::string>();
    std::int64_t points = 0;
    for (std::size_t i = 0; i < text.size(); ++i)
        if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 && ++points > r.max_chars) {
            text.resize(i);
            break;
        }
    out["text"] = std::move(text);
    out["text_chars"] = value.value("chars", 0);
    out["readable"] = value.value("readable", false);
    out["extractor_version"] = value.value("extractor", kPageTextExtractor);
}

bool textual(const std::string &content_type) {
    std::string t = content_type.substr(0, content_type.find(';'));
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
    return t.empty() || t == "text/html" || t == "application/xhtml+xml" || t.rfind("text/", 0) == 0;
}

bool html(const std::string &content_type) {
    return content_type.empty() || content_type.find("html") != std::string::npos;
}

void render(int port, const std::string &ws_path, const PageTextRequest &r, Clock::time_point deadline, json &out) {
    cdp::Connection conn(port, ws_path, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    HiddenTab tab(conn, deadline);
    conn.call_until("Page.enable", json::object(), tab.session, deadline);
    conn.call_until("Network.enable", json::object(), tab.session, deadline);
    int nav = conn.send("Page.navigate", {{"url", r.url}}, tab.session);
    std::string frame;
    for (bool loaded = false; !loaded;) {
        json msg = conn.next(deadline);
        if (msg.value("sessionId", "") != tab.session && msg.value("id", 0) != nav) continue;
        if (msg.value("id", 0) == nav) {
            const json result = msg.value("result", json::object());
            if (msg.contains("error")) out["net_error"] = msg["error"].value("message", "navigation refused");
            if (auto e = result.value("errorText", ""); !e.empty()) out["net_error"] = e;
            if (out.contains("net_error")) return;
            frame = result.value("frameId", "");
            continue;
        }
        const std::string method = msg.value("method", "");
        const json p = msg.value("params", json::object());
        if (method == "Network.responseReceived" && p.value("type", "") == "Document" &&
            (frame.empty() || p.value("frameId", "") == frame)) {
            const json response = p.value("response", json::object());
            out["http_status"] = response.value("status", 0);
            out["final_url"] = response.value("url", r.url);
            out["content_type"] = response.value("mimeType", "");
        } else if (method == "Page.loadEventFired") {
            loaded = true;
        }
    }
    if (!textual(out.value("content_type", ""))) return;
    extract(tab, "document", r, deadline, out);
}

void curl_mode(int port, const std::string &ws_path, BrowserCurl &curl, const PageTextRequest &r,
               Clock::time_point deadline, json &out) {
    CurlRequest c;
    c.url = r.url;
    c.timeout_ms = r.timeout_ms;
    CurlResponse answer;
    try {
        answer = curl.request(port, ws_path, c);
    } catch (const Error &e) {
        if (e.status() == 504) throw cdp::Failure("timeout", true);
        out["net_error"] = e.what();
        return;
    }
    out["http_status"] = answer.status;
    out["final_url"] = answer.final_url.empty() ? r.url : answer.final_url;
    std::string type;
    for (const auto &[name, value] : answer.headers)
        if (name.size() == 12 && std::equal(name.begin(), name.end(), "content-type", [](char a, char b) {
                return std::tolower(static_cast<unsigned char>(a)) == b;
            }))
            type = value;
    out["content_type"] = type.substr(0, type.find(';'));
    if (!textual(type)) return;
    // The 1 MiB page read cap: what is parsed is the answer's first MiB.
    std::string body = valid_utf8(std::string_view(answer.body).substr(0, 1 << 20));
    cdp::Connection conn(port, ws_path, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    HiddenTab tab(conn, deadline);
    const std::string doc =
        html(type) ? "(() => { const d = new DOMParser().parseFromString(" + json(body).dump() +
                         ", 'text/html'); const b = d.createElement('base'); b.href = " + out["final_url"].dump() +
                         "; d.head.prepend(b); return d; })()"
                   // plain text: a document whose body is that text
                   : "(() => { const d = document.implementation.createHTMLDocument(''); const p = "
                     "d.createElement('pre'); p.textContent = " +
                         json(body).dump() + "; d.body.append(p); return d; })()";
    extract(tab, doc, r, deadline, out);
}

} // namespace

PageTextRequest parse_page_text_request(const json &body) {
    PageTextRequest r;
    if (!body.is_object()) throw Error::invalid("body", "must be an object");
    r.url = body.value("url", "");
    if (!http_origin(r.url)) throw Error::invalid("url", "must be an http(s) URL");
    r.mode = body.value("mode", "render");
    if (r.mode != "render" && r.mode != "curl") throw Error::invalid("mode", "must be render or curl");
    r.format = body.value("format", "markdown");
    if (r.format != "markdown" && r.format != "text") throw Error::invalid("format", "must be markdown or text");
    if (auto t = body.find("timeout_ms"); t != body.end() && t->is_number_integer())
        r.timeout_ms = static_cast<int>(std::clamp<std::int64_t>(t->get<std::int64_t>(), 1, kCurlMaxTimeoutMs));
    if (auto m = body.find("max_chars"); m != body.end() && m->is_number_integer())
        r.max_chars = std::clamp<std::int64_t>(m->get<std::int64_t>(), 0, kPageTextMaxChars);
    return r;
}

json page_text(int port, const std::string &ws_path, BrowserCurl &curl, const PageTextRequest &r) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(r.timeout_ms);
    json out = {{"timed_out", false}, {"extractor_version", kPageTextExtractor}, {"method", r.mode}};
    try {
        if (r.mode == "curl")
            curl_mode(port, ws_path, curl, r, deadline, out);
        else
            render(port, ws_path, r, deadline, out);
    } catch (const cdp::Failure &e) {
        if (e.timed_out())
            out["timed_out"] = true;
        else
            out["net_error"] = std::string("the browser failed: ") + e.what();
    }
    return out;
}

} // namespace hangar::browsers
