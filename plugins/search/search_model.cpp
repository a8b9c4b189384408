#include "search_model.hpp"

#include <hangar/resource.hpp>

#include <Poco/URI.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace hangar::search {

namespace {

// A provider's answer is untrusted: every string kept from it is bounded.
constexpr std::size_t kMaxUrl = 4096, kMaxTitle = 1024, kMaxSnippet = 8192, kMaxAnswer = 16384;
constexpr std::size_t kMaxQuery = 2000, kMaxDomains = 100;

const std::set<std::string> kQueryFields = {"query",       "strategy",        "max_results",     "country",
                                            "language",    "include_domains", "exclude_domains", "recency",
                                            "start_date",  "end_date",        "safe_search",     "strict_params",
                                            "include_raw", "content",         "timeout_ms"};

// "a.b" for a field inside another.
std::string dotted(const std::string &outer, const std::string &inner) {
    std::string out = outer;
    out += '.';
    out += inner;
    return out;
}

std::string str_field(const json &v, const std::string &field) {
    if (!v.is_string()) throw Error::invalid(field, "must be a string");
    return v.get<std::string>();
}

std::string one_of(const json &v, const std::string &field, std::initializer_list<const char *> allowed) {
    std::string s = str_field(v, field);
    std::string list;
    for (const char *a : allowed) {
        if (s == a) return s;
        list += (list.empty() ? "" : ", ") + std::string(a);
    }
    throw Error::invalid(field, "must be one of " + list);
}

std::int64_t int_field(const json &v, const std::string &field, std::int64_t lo, std::int64_t hi) {
    if (!v.is_number_integer()) throw Error::invalid(field, "must be an integer");
    auto n = v.get<std::int64_t>();
    if (n < lo || n > hi)
        throw Error::invalid(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return n;
}

bool bool_field(const json &v, const std::string &field) {
    if (!v.is_boolean()) throw Error::invalid(field, "must be true or false");
    return v.get<bool>();
}

bool valid_host(const std::string &h) {
    if (h.empty() || h.size() > 253 || h.front() == '.' || h.back() == '.' || h.find("..") != std::string::npos)
        return false;
    return std::all_of(h.begin(), h.end(), [](unsigned char c) { return std::isalnum(c) || c == '.' || c == '-'; });
}

std::vector<std::string> domains(const json &v, const std::string &field) {
    if (!v.is_array()) throw Error::invalid(field, "must be an array of host names");
    if (v.size() > kMaxDomains) throw Error::invalid(field, "lists at most " + std::to_string(kMaxDomains) + " hosts");
    std::vector<std::string> out;
    for (const auto &d : v) {
        std::string h = str_field(d, field);
        std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
        if (!valid_host(h)) throw Error::invalid(field, "'" + d.get<std::string>() + "' is not a host name");
        out.push_back(h);
    }
    return out;
}

// YYYY-MM-DD with a real day.
std::string date_field(const json &v, const std::string &field) {
    std::string s = str_field(v, field);
    auto digits = [&](std::size_t at, std::size_t n) {
        return std::all_of(s.begin() + static_cast<long>(at), s.begin() + static_cast<long>(at + n),
                           [](unsigned char c) { return std::isdigit(c); });
    };
    if (s.size() != 10 || s[4] != '-' || s[7] != '-' || !digits(0, 4) || !digits(5, 2) || !digits(8, 2))
        throw Error::invalid(field, "must be a date YYYY-MM-DD");
    int y = std::stoi(s.substr(0, 4)), m = std::stoi(s.substr(5, 2)), d = std::stoi(s.substr(8, 2));
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (m < 1 || m > 12 || d < 1 || d > days[m - 1] + (m == 2 && leap ? 1 : 0))
        throw Error::invalid(field, "is not a calendar date");
    return s;
}

Target target(const json &v, const std::string &field) {
    if (!v.is_object()) throw Error::invalid(field, "must be an object {provider, options?}");
    for (const auto &[k, _] : v.items())
        if (k != "provider" && k != "options") throw Error::invalid(dotted(field, k), "is not a provider target field");
    if (!v.contains("provider")) throw Error::invalid(field + ".provider", "is required");
    Target t;
    t.provider = str_field(v["provider"], field + ".provider");
    if (!known_slug(t.provider)) throw Error::invalid(field + ".provider", "'" + t.provider + "' is not a provider");
    if (v.contains("options") && !v["options"].is_null()) {
        if (!v["options"].is_object()) throw Error::invalid(field + ".options", "must be an object");
        t.options = v["options"];
    }
    return t;
}

std::string truncate_utf8(const std::string &s, std::size_t max_bytes) {
    if (s.size() <= max_bytes) return s;
    std::size_t n = max_bytes;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
        --n;
    return s.substr(0, n);
}

// The first `chars` Unicode characters of valid UTF-8 `s`.
std::string first_chars(const std::string &s, std::int64_t chars, bool &cut) {
    std::size_t i = 0;
    std::int64_t n = 0;
    while (i < s.size() && n < chars) {
        ++i;
        while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80)
            ++i;
        ++n;
    }
    cut = i < s.size();
    return s.substr(0, i);
}

std::string text_of(const json &v, std::size_t cap) {
    if (!v.is_string()) return {};
    return truncate_utf8(v.get<std::string>(), cap);
}

} // namespace

const std::vector<std::string> &sdk_slugs() {
    static const std::vector<std::string> slugs = {"brave", "exa",   "perplexity", "context", "parallel",
                                                   "valyu", "octen", "you",        "tavily",  "serpapi"};
    return slugs;
}

bool known_slug(const std::string &slug) {
    return slug == kSearxng || std::find(sdk_slugs().begin(), sdk_slugs().end(), slug) != sdk_slugs().end();
}

Availability availability(const std::string &slug, const Settings &s) {
    if (slug == kSearxng) {
        if (s.searxng_url.empty()) return {false, "no SearXNG instance is configured (searxng_url in search.ini)"};
        return {true, ""};
    }
    if (!s.keyed.count(slug))
        return {false,
                "the operator has not configured an API key for " + slug + " (" + slug + "_api_key in search.ini)"};
    return {false, "Hangar has no client for " + slug + "'s API yet (issue 50): it serves no search here"};
}

json warning(const std::string &code, const std::string &message, const std::string &param,
             const std::string &provider) {
    json w = {{"code", code}, {"message", message}};
    if (!param.empty()) w["param"] = param;
    if (!provider.empty()) w["provider"] = provider;
    return w;
}

ContentOptions parse_content_options(const json &value, const std::string &field) {
    ContentOptions o;
    if (!value.is_object()) throw Error::invalid(field, "must be an object");
    for (const auto &[k, v] : value.items()) {
        const std::string f = dotted(field, k);
        if (v.is_null()) continue;
        if (k == "source")
            o.source = one_of(v, f, {"auto", "provider", "browser"});
        else if (k == "format")
            o.format = one_of(v, f, {"markdown", "text"});
        else if (k == "max_chars")
            o.max_chars = int_field(v, f, 1, 10'000'000);
        else if (k == "max_age_hours")
            o.max_age_hours = int_field(v, f, 0, 100'000);
        else if (k == "timeout_ms")
            o.timeout_ms = int_field(v, f, 1, 600'000);
        else if (k == "browser") {
            if (!v.is_object()) throw Error::invalid(f, "must be an object");
            for (const auto &[bk, bv] : v.items()) {
                if (bv.is_null()) continue;
                if (bk == "browser_id")
                    o.browser_id = str_field(bv, f + ".browser_id");
                else if (bk == "mode")
                    o.browser_mode = one_of(bv, f + ".mode", {"curl", "render"});
                else
                    throw Error::invalid(dotted(f, bk), "is not a browser option");
            }
        } else
            throw Error::invalid(f, "is not a content option");
    }
    if (o.max_age_hours && o.source != "auto")
        throw Error::invalid(field + ".max_age_hours", "applies to source=auto only");
    if ((o.browser_id || o.browser_mode) && o.source == "provider")
        throw Error::invalid(field + ".browser", "needs source=auto or source=browser");
    return o;
}

Query parse_query(const json &body) {
    Query q;
    for (const auto &[k, _] : body.items())
        if (!kQueryFields.count(k)) throw Error::invalid(k, "is not a search request field");
    if (!body.contains("query") || body["query"].is_null()) throw Error::invalid("query", "is required");
    q.query = str_field(body["query"], "query");
    if (std::all_of(q.query.begin(), q.query.end(), [](unsigned char c) { return std::isspace(c); }))
        throw Error::invalid("query", "must not be empty");
    if (q.query.size() > kMaxQuery)
        throw Error::invalid("query", "is longer than " + std::to_string(kMaxQuery) + " bytes");
    auto given = [&](const char *k) { return body.contains(k) && !body[k].is_null(); };
    if (given("strategy")) {
        const json &st = body["strategy"];
        if (!st.is_object()) throw Error::invalid("strategy", "must be an object");
        if (!st.contains("type")) throw Error::invalid("strategy.type", "is required");
        q.strategy = one_of(st["type"], "strategy.type", {"auto", "pinned", "fallback"});
        for (const auto &[k, _] : st.items()) {
            const bool ok = k == "type" || (q.strategy == "pinned" && k == "provider") ||
                            (q.strategy == "fallback" && (k == "providers" || k == "fallback_on")) ||
                            (q.strategy == "auto" && (k == "provider_options" || k == "fallback_on"));
            if (!ok) throw Error::invalid("strategy." + k, "is not a field of a " + q.strategy + " strategy");
        }
        if (q.strategy == "pinned") {
            if (!st.contains("provider")) throw Error::invalid("strategy.provider", "is required");
            q.targets.push_back(target(st["provider"], "strategy.provider"));
        } else {
            const char *list = q.strategy == "fallback" ? "providers" : "provider_options";
            const std::string f = std::string("strategy.") + list;
            if (q.strategy == "fallback" && !st.contains(list)) throw Error::invalid(f, "is required");
            if (st.contains(list) && !st[list].is_null()) {
                if (!st[list].is_array()) throw Error::invalid(f, "must be an array of provider targets");
                std::set<std::string> seen;
                for (const auto &t : st[list]) {
                    q.targets.push_back(target(t, f));
                    if (!seen.insert(q.targets.back().provider).second)
                        throw Error::invalid(f, "names " + q.targets.back().provider + " twice");
                }
                if (q.strategy == "fallback" && q.targets.empty()) throw Error::invalid(f, "must name a provider");
            }
            if (st.contains("fallback_on") && !st["fallback_on"].is_null()) {
                if (!st["fallback_on"].is_array()) throw Error::invalid("strategy.fallback_on", "must be an array");
                q.fallback_on.clear();
                for (const auto &c : st["fallback_on"])
                    q.fallback_on.insert(one_of(c, "strategy.fallback_on", {"error", "timeout", "empty"}));
            }
        }
    }
    if (given("max_results")) q.max_results = int_field(body["max_results"], "max_results", 1, 100);
    if (given("country")) {
        std::string c = str_field(body["country"], "country");
        if (c.size() != 2 || !std::isalpha(static_cast<unsigned char>(c[0])) ||
            !std::isalpha(static_cast<unsigned char>(c[1])))
            throw Error::invalid("country", "must be an ISO 3166-1 alpha-2 code");
        std::transform(c.begin(), c.end(), c.begin(), [](unsigned char ch) { return std::toupper(ch); });
        q.country = c;
    }
    if (given("language")) {
        std::string l = str_field(body["language"], "language");
        // BCP 47, loosely: a 2-3 letter language, then alphanumeric subtags of 1-8.
        bool ok = l.size() >= 2 && l.size() <= 35;
        std::size_t first = l.find('-');
        std::string primary = l.substr(0, first);
        ok = ok && primary.size() >= 2 && primary.size() <= 3 &&
             std::all_of(primary.begin(), primary.end(), [](unsigned char c) { return std::isalpha(c); });
        for (std::size_t at = first; ok && at != std::string::npos;) {
            std::size_t next = l.find('-', at + 1);
            std::string sub = l.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
            ok = !sub.empty() && sub.size() <= 8 &&
                 std::all_of(sub.begin(), sub.end(), [](unsigned char c) { return std::isalnum(c); });
            at = next;
        }
        if (!ok) throw Error::invalid("language", "must be a BCP 47 language tag such as en or en-US");
        q.language = l;
    }
    if (given("include_domains")) q.include_domains = domains(body["include_domains"], "include_domains");
    if (given("exclude_domains")) q.exclude_domains = domains(body["exclude_domains"], "exclude_domains");
    if (given("recency")) q.recency = one_of(body["recency"], "recency", {"hour", "day", "week", "month", "year"});
    if (given("start_date")) q.start_date = date_field(body["start_date"], "start_date");
    if (given("end_date")) q.end_date = date_field(body["end_date"], "end_date");
    if (q.start_date && q.end_date && *q.start_date > *q.end_date)
        throw Error::invalid("start_date", "is after end_date");
    if (given("safe_search")) q.safe_search = one_of(body["safe_search"], "safe_search", {"off", "moderate", "strict"});
    if (given("strict_params")) q.strict = bool_field(body["strict_params"], "strict_params");
    if (given("include_raw")) q.include_raw = bool_field(body["include_raw"], "include_raw");
    if (given("content")) {
        const json &c = body["content"];
        if (c.is_boolean()) {
            if (c.get<bool>()) q.content = ContentOptions{};
        } else
            q.content = parse_content_options(c, "content");
        if (q.content && q.content->source == "browser")
            throw Error::invalid("content.source", "inline retrieval never uses a browser: ask POST "
                                                   "/search/{id}/contents with source=browser after the search");
        if (q.content && (q.content->browser_id || q.content->browser_mode))
            throw Error::invalid("content.browser", "inline retrieval never uses a browser");
    }
    if (given("timeout_ms")) q.timeout_ms = int_field(body["timeout_ms"], "timeout_ms", 1, 600'000);
    return q;
}

Plan plan(const Query &q, const Settings &s) {
    Plan p;
    auto options_for = [&](const std::string &slug) {
        for (const auto &t : q.targets)
            if (t.provider == slug) return t.options;
        return json::object();
    };
    auto take = [&](const Target &t) {
        auto a = availability(t.provider, s);
        if (a.available)
            p.attempts.push_back(t);
        else
            p.warnings.push_back(
                warning("provider_ineligible", t.provider + " cannot serve: " + a.reason, "strategy", t.provider));
    };
    if (q.strategy == "pinned") {
        const Target &t = q.targets.front();
        auto a = availability(t.provider, s);
        if (!a.available)
            throw Error(400, "provider_unavailable", "the pinned provider " + t.provider + " cannot serve: " + a.reason,
                        {{"provider_ineligible", t.provider}});
        p.attempts.push_back(t);
    } else if (q.strategy == "fallback") {
        for (const auto &t : q.targets)
            take(t);
    } else {
        // auto: the operator's order; provider_options, when given, names the targets allowed.
        for (const auto &slug : s.order) {
            if (!q.targets.empty() &&
                std::none_of(q.targets.begin(), q.targets.end(), [&](const Target &t) { return t.provider == slug; }))
                continue;
            if (availability(slug, s).available) p.attempts.push_back({slug, options_for(slug)});
        }
        for (const auto &t : q.targets)
            if (!availability(t.provider, s).available)
                p.warnings.push_back(warning("provider_ineligible",
                                             t.provider + " cannot serve: " + availability(t.provider, s).reason,
                                             "strategy.provider_options", t.provider));
    }
    if (p.attempts.empty()) {
        std::vector<Error::Detail> details;
        for (const auto &w : p.warnings)
            details.push_back({"provider_ineligible", w["message"].get<std::string>()});
        throw Error(400, "provider_unavailable",
                    "no provider this strategy allows can serve on this server (configure one in search.ini)",
                    std::move(details));
    }
    return p;
}

SearxngCall searxng_call(const Query &q, const json &options, int cap) {
    SearxngCall c;
    auto unsupported = [&](const std::string &param, const std::string &why) {
        if (q.strict)
            throw Error::invalid(param, "SearXNG cannot honour it exactly (" + why + ") and strict_params is set");
        c.warnings.push_back(warning("param_unsupported", param + " was dropped: " + why, param, kSearxng));
    };
    Poco::URI uri("/search");
    uri.addQueryParameter("q", q.query);
    uri.addQueryParameter("format", "json");
    std::int64_t want = q.max_results.value_or(10);
    if (want > cap) {
        if (q.strict)
            throw Error::invalid("max_results", "SearXNG returns at most " + std::to_string(cap) +
                                                    " results here and strict_params is set");
        c.warnings.push_back(
            warning("max_results_clamped",
                    "max_results " + std::to_string(want) + " is clamped to SearXNG's cap of " + std::to_string(cap),
                    "max_results", kSearxng));
        want = cap;
    }
    c.keep = static_cast<std::size_t>(want);
    if (q.language) uri.addQueryParameter("language", *q.language);
    if (q.country) unsupported("country", "SearXNG has no country parameter; give a regional language such as en-US");
    if (q.safe_search)
        uri.addQueryParameter("safesearch", *q.safe_search == "off" ? "0" : *q.safe_search == "moderate" ? "1" : "2");
    if (q.recency) {
        if (q.start_date || q.end_date)
            c.warnings.push_back(
                warning("date_filter_overridden", "recency wins over start_date/end_date", "recency", kSearxng));
        std::string range = *q.recency;
        if (range == "hour") {
            if (q.strict)
                throw Error::invalid("recency", "SearXNG's narrowest time range is a day and strict_params is set");
            c.warnings.push_back(warning("recency_emulated",
                                         "SearXNG's narrowest time range is a day: hour is widened to day", "recency",
                                         kSearxng));
            range = "day";
        }
        uri.addQueryParameter("time_range", range);
    } else {
        if (q.start_date) unsupported("start_date", "SearXNG filters by time range only (use recency)");
        if (q.end_date) unsupported("end_date", "SearXNG filters by time range only (use recency)");
    }
    if (!q.include_domains.empty() || !q.exclude_domains.empty()) {
        c.include_domains = q.include_domains;
        c.exclude_domains = q.exclude_domains;
        c.warnings.push_back(warning("filter_emulated",
                                     "SearXNG has no domain filter: results are filtered by host after the search, so "
                                     "fewer may come back",
                                     q.include_domains.empty() ? "exclude_domains" : "include_domains", kSearxng));
    }
    for (const auto &[k, v] : options.items()) {
        const std::string f = "options." + k;
        if (k == "engines" || k == "categories") {
            if (!v.is_string()) throw Error::invalid(f, "must be a comma-separated string");
            uri.addQueryParameter(k, v.get<std::string>());
        } else if (k == "pageno") {
            uri.addQueryParameter(k, std::to_string(int_field(v, f, 1, 50)));
        } else
            throw Error::invalid(f, "is not a SearXNG option (engines, categories, pageno)");
    }
    c.query_string = uri.getRawQuery();
    return c;
}

std::string url_host(const std::string &url) {
    try {
        Poco::URI u(url);
        std::string h = u.getHost();
        std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
        return h;
    } catch (const std::exception &) {
        return {};
    }
}

bool host_matches(const std::string &host, const std::string &domain) {
    return host == domain ||
           (host.size() > domain.size() && host.ends_with(domain) && host[host.size() - domain.size() - 1] == '.');
}

Parsed parse_searxng(const std::string &body, const SearxngCall &call, const std::function<std::string()> &make_id,
                     bool include_raw) {
    json doc = json::parse(body, nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("results") || !doc["results"].is_array())
        throw std::invalid_argument("the answer is not SearXNG's JSON format (no results array)");
    Parsed p;
    for (const auto &r : doc["results"]) {
        if (p.results.size() >= call.keep) break;
        if (!r.is_object() || !r.contains("url") || !r["url"].is_string()) continue;
        const std::string url = r["url"].get<std::string>();
        if (url.size() > kMaxUrl || !(url.starts_with("http://") || url.starts_with("https://"))) continue;
        const std::string host = url_host(url);
        if (host.empty()) continue;
        if (!call.include_domains.empty() && std::none_of(call.include_domains.begin(), call.include_domains.end(),
                                                          [&](const std::string &d) { return host_matches(host, d); }))
            continue;
        if (std::any_of(call.exclude_domains.begin(), call.exclude_domains.end(),
                        [&](const std::string &d) { return host_matches(host, d); }))
            continue;
        json res = {{"id", make_id()}, {"rank", p.results.size() + 1}, {"url", url}};
        if (auto t = text_of(r.value("title", json()), kMaxTitle); !t.empty()) res["title"] = t;
        std::optional<std::string> content;
        if (auto s = text_of(r.value("content", json()), kMaxSnippet); !s.empty()) {
            res["snippet"] = s;
            content = s;
        }
        if (auto d = text_of(r.value("publishedDate", json()), 64); !d.empty()) res["published_date"] = d;
        if (auto e = text_of(r.value("engine", json()), 128); !e.empty()) res["source"] = e;
        if (include_raw) res["raw"] = r;
        p.results.push_back(std::move(res));
        p.content.push_back(std::move(content));
    }
    if (doc.contains("answers") && doc["answers"].is_array())
        for (const auto &a : doc["answers"]) {
            // SearXNG gives strings; newer releases objects with an `answer`.
            std::string t = a.is_string() ? text_of(a, kMaxAnswer)
                                          : (a.is_object() ? text_of(a.value("answer", json()), kMaxAnswer) : "");
            if (!t.empty()) {
                p.answer = t;
                break;
            }
        }
    if (include_raw) p.raw = std::move(doc);
    return p;
}

json provider_content(const std::optional<std::string> &text, std::int64_t fetched_at_ms, const ContentOptions &o) {
    if (!text)
        return {{"status", "unavailable"},
                {"cache_status", "bypass"},
                {"error",
                 {{"code", "no_provider_content"},
                  {"message", "the provider returned no content for this result"},
                  {"retryable", false}}}};
    bool cut = false;
    std::string t = o.max_chars ? first_chars(*text, *o.max_chars, cut) : *text;
    // SearXNG's content is a plain-text snippet: returned as text even when markdown was asked.
    return {{"status", "ok"},
            {"text", t},
            {"format", "text"},
            {"method", "provider"},
            {"completeness", "excerpt"},
            {"truncated", cut},
            {"cache_status", "bypass"},
            {"fetched_at", hangar::rfc3339(fetched_at_ms)}};
}

json failed_content(const std::string &status, const std::string &code, const std::string &message, bool retryable) {
    return {{"status", status},
            {"cache_status", "bypass"},
            {"error", {{"code", code}, {"message", message}, {"retryable", retryable}}}};
}

json browser_content(const json &seen, const std::string &mode, const ContentOptions &o, std::int64_t fetched_at_ms) {
    json c;
    const int http = seen.value("http_status", json()).is_number_integer() ? seen["http_status"].get<int>() : 0;
    const std::string net = seen.value("net_error", "");
    const std::string type = seen.value("content_type", "");
    std::string lower_type = type;
    std::transform(lower_type.begin(), lower_type.end(), lower_type.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    if (seen.value("timed_out", false)) {
        c = failed_content("timeout", "timeout", "the page did not load within the result's timeout", true);
    } else if (http < 400 && !lower_type.empty() && lower_type.find("html") == std::string::npos &&
               lower_type.rfind("text/", 0) != 0) {
        // Before net errors: a download (a PDF, an image) aborts the navigation after its response
        // said what it is.
        c = failed_content("unsupported_type", "unsupported_type", "the page is " + type + ", not HTML or text", false);
    } else if (!net.empty()) {
        // Chromium's net errors for a refused request (the egress forwarder, a policy) say BLOCKED,
        // ACCESS_DENIED or TUNNEL; anything else is the network's.
        const bool refused = net.find("BLOCKED") != std::string::npos ||
                             net.find("ACCESS_DENIED") != std::string::npos ||
                             net.find("TUNNEL_CONNECTION_FAILED") != std::string::npos;
        c = refused ? failed_content("blocked", "blocked", "the browser refused the request: " + net, false)
                    : failed_content("error", "fetch_failed", "the browser could not load the page: " + net, true);
    } else if (http == 403 || http == 429) {
        c = failed_content("blocked", "http_" + std::to_string(http),
                           "the site answered " + std::to_string(http) + " (blocked or rate limited)", http == 429);
    } else if (http >= 400) {
        c = failed_content("error", "http_" + std::to_string(http), "the site answered " + std::to_string(http),
                           http >= 500);
    } else if (!seen.value("text", json()).is_string() || seen["text"].get<std::string>().empty()) {
        c = failed_content("extraction_failed", "extraction_failed",
                           seen.value("extraction_error", "no readable text was found on the page"), false);
    } else {
        const std::int64_t limit = o.max_chars.value_or(std::int64_t{1} << 20);
        c = {{"status", "ok"},
             {"text", seen["text"]},
             {"format", o.format},
             // The readable part (article/main) is the page's whole content; without one it is the
             // body's text with navigation and the like dropped, which may be more or less.
             {"completeness", seen.value("readable", false) ? "full_page" : "unknown"},
             {"truncated", seen.value("text_chars", std::int64_t{0}) > limit}};
    }
    c["method"] = mode == "curl" ? "browser_curl" : "browser_render";
    c["cache_status"] = "bypass";
    c["fetched_at"] = hangar::rfc3339(fetched_at_ms);
    if (seen.value("final_url", json()).is_string()) c["final_url"] = seen["final_url"];
    if (http) c["http_status"] = http;
    c["extractor_version"] = seen.value("extractor_version", "innertext-1");
    return c;
}

ContentsRequest parse_contents(const json &body, const json &search) {
    ContentsRequest r;
    for (const auto &[k, _] : body.items())
        if (k != "result_ids" && k != "limit" && k != "content" && k != "timeout_ms")
            throw Error::invalid(k, "is not a contents request field");
    auto given = [&](const char *k) { return body.contains(k) && !body[k].is_null(); };
    if (given("result_ids") == given("limit"))
        throw Error::invalid("result_ids", "give exactly one of result_ids and limit");
    const json &results = search.at("results");
    if (given("limit")) {
        auto n = int_field(body["limit"], "limit", 1, 100);
        for (const auto &res : results)
            if (static_cast<std::int64_t>(r.result_ids.size()) < n)
                r.result_ids.push_back(res["id"].get<std::string>());
    } else {
        const json &ids = body["result_ids"];
        if (!ids.is_array() || ids.empty())
            throw Error::invalid("result_ids", "must be a non-empty array of result ids");
        if (ids.size() > 100) throw Error::invalid("result_ids", "lists at most 100 ids");
        for (const auto &id : ids) {
            std::string s = str_field(id, "result_ids");
            if (std::none_of(results.begin(), results.end(), [&](const json &res) { return res["id"] == s; }))
                throw Error::invalid("result_ids", "'" + s + "' is not a result of this search");
            r.result_ids.push_back(s);
        }
    }
    if (given("content")) r.options = parse_content_options(body["content"], "content");
    if (given("timeout_ms")) r.timeout_ms = int_field(body["timeout_ms"], "timeout_ms", 1, 600'000);
    return r;
}

bool retained_serves(const ContentOptions &o, bool has_text, std::int64_t fetched_at_ms, std::int64_t now_ms) {
    if (o.source == "browser" || !has_text) return false;
    if (o.source == "provider") return true;
    if (!o.max_age_hours) return true;
    return now_ms - fetched_at_ms <= *o.max_age_hours * 3600 * 1000 && *o.max_age_hours > 0;
}

json provider_entry(const std::string &slug, const Settings &s) {
    const auto a = availability(slug, s);
    auto support = [](const char *level, const std::string &notes = "") {
        json j = {{"support", level}};
        if (!notes.empty()) j["notes"] = notes;
        return j;
    };
    json e;
    if (slug == kSearxng) {
        e = {{"slug", slug},
             {"max_results_cap", s.searxng_cap},
             {"content", {{"inline", true}, {"post_hoc", true}, {"freshness_control", false}}},
             {"params",
              {{"country", support("unsupported", "SearXNG has no country parameter; use a regional language")},
               {"language", support("native", "passed as SearXNG's language")},
               {"safe_search", support("native", "off/moderate/strict = safesearch 0/1/2")},
               {"recency", support("native", "SearXNG time_range; hour is widened to day")},
               {"start_date", support("unsupported", "SearXNG filters by time range only")},
               {"end_date", support("unsupported", "SearXNG filters by time range only")},
               {"include_domains", support("emulated", "results are filtered by host after the search")},
               {"exclude_domains", support("emulated", "results are filtered by host after the search")}}},
             {"provider_options",
              {{"schema",
                {{"type", "object"},
                 {"additionalProperties", false},
                 {"properties",
                  {{"engines", {{"type", "string"}, {"description", "comma-separated SearXNG engine names"}}},
                   {"categories", {{"type", "string"}, {"description", "comma-separated SearXNG categories"}}},
                   {"pageno", {{"type", "integer"}, {"minimum", 1}, {"maximum", 50}}}}}}},
               {"schema_ref", "SearxngOptions"},
               {"examples", json::array({{{"engines", "wikipedia"}}})}}},
             {"notes",
              json::array({"Self-hosted SearXNG metasearch run by this server's operator; results are "
                           "SearXNG's merged engines' results, its content is a snippet (excerpt); cost is 0"})}};
    } else {
        const std::string why = "not served by this server: Hangar has no client for this provider yet (issue 50)";
        json params = json::object();
        for (const char *p : {"country", "end_date", "exclude_domains", "include_domains", "language", "recency",
                              "safe_search", "start_date"})
            params[p] = support("unsupported", why);
        std::string ref = slug;
        ref[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(ref[0])));
        e = {{"slug", slug},
             {"max_results_cap", 0},
             {"content", {{"inline", false}, {"post_hoc", false}, {"freshness_control", false}}},
             {"params", params},
             {"provider_options", {{"schema", {{"type", "object"}}}, {"schema_ref", ref + "Options"}}},
             {"notes", json::array({why})}};
    }
    // Hangar's additions: whether the provider can serve here, and if not why.
    e["available"] = a.available;
    if (!a.available) {
        e["unavailable_reason"] = a.reason;
        e["notes"].push_back("unavailable: " + a.reason);
    }
    return e;
}

} // namespace hangar::search
