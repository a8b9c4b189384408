#include "config_registry_model.hpp"

#include <hangar/resource.hpp>

#include <Poco/Exception.h>
#include <Poco/Net/IPAddress.h>
#include <Poco/URI.h>
#include <libpsl.h>

#include <algorithm>
#include <array>
#include <map>

namespace hangar::config_registry {

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

std::string registrable(const std::string &host) {
    Poco::Net::IPAddress ip;
    if (Poco::Net::IPAddress::tryParse(host, ip)) return host;
    static const psl_ctx_t *psl = [] {
        const psl_ctx_t *latest = psl_latest(nullptr);
        return latest ? latest : psl_builtin();
    }();
    const char *d = psl_registrable_domain(psl, host.c_str());
    return d ? std::string(d) : host;
}

void no_unknown_fields(const json &body, std::initializer_list<const char *> known) {
    for (const auto &item : body.items()) {
        const std::string &k = item.key();
        if (std::find_if(known.begin(), known.end(), [&](const char *n) { return k == n; }) == known.end())
            throw Error::invalid(k, "is not a field of this request");
    }
}

} // namespace

Target normalize(const std::string &url) {
    if (url.empty()) throw Error::invalid("url", "is required");
    if (url.size() > 2048) throw Error::invalid("url", "is longer than 2048 characters");
    Poco::URI u;
    try {
        u = Poco::URI(url);
    } catch (const Poco::Exception &) {
        throw Error::invalid("url", "is not a URL");
    }
    Target t;
    t.scheme = lower(u.getScheme());
    if (t.scheme != "http" && t.scheme != "https") throw Error::invalid("url", "must be an http or https URL");
    t.host = lower(u.getHost());
    if (t.host.empty()) throw Error::invalid("url", "has no host");
    if (!u.getUserInfo().empty()) throw Error::invalid("url", "must not carry credentials");
    while (!t.host.empty() && t.host.back() == '.')
        t.host.pop_back();
    t.port = u.getPort();
    const bool default_port = (t.scheme == "http" && t.port == 80) || (t.scheme == "https" && t.port == 443);
    std::string path = u.getPath();
    if (path.empty()) path = "/";
    const bool v6 = t.host.find(':') != std::string::npos;
    t.normalized = t.scheme + "://" + (v6 ? "[" + t.host + "]" : t.host) +
                   (default_port ? std::string() : ":" + std::to_string(t.port)) + path;
    t.domain = registrable(t.host);
    return t;
}

json target_json(const Target &t) {
    return {{"normalized", t.normalized}, {"host", t.host}, {"domain", t.domain}};
}

bool literal_non_public(const std::string &host) {
    Poco::Net::IPAddress ip;
    if (host == "localhost" || host.ends_with(".localhost")) return true;
    if (!Poco::Net::IPAddress::tryParse(host, ip)) return false;
    return ip.isLoopback() || ip.isWildcard() || ip.isSiteLocal() || ip.isLinkLocal() || ip.isMulticast() ||
           (ip.family() == Poco::Net::AddressFamily::IPv4 &&
            (ip.toString().starts_with("100.64.") || ip.toString().starts_with("0.")));
}

namespace {
LookupRequest lookup_fields(const json &body) {
    LookupRequest r;
    if (!body.contains("url") || !body["url"].is_string()) throw Error::invalid("url", "is required (a string)");
    r.target = normalize(body["url"].get<std::string>());
    if (body.contains("allowed_proxy_countries") && !body["allowed_proxy_countries"].is_null()) {
        const json &c = body["allowed_proxy_countries"];
        if (!c.is_array()) throw Error::invalid("allowed_proxy_countries", "must be an array of ISO 3166 codes");
        std::vector<std::string> out;
        for (const auto &v : c) {
            const std::string s = v.is_string() ? v.get<std::string>() : std::string();
            if (s.size() != 2 || !std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isalpha(ch); }))
                throw Error::invalid("allowed_proxy_countries", "entries must be ISO 3166 alpha-2 codes like \"US\"");
            std::string up = s;
            std::transform(up.begin(), up.end(), up.begin(), [](unsigned char ch) { return std::toupper(ch); });
            out.push_back(up);
        }
        r.countries = out;
    }
    return r;
}
} // namespace

LookupRequest parse_lookup(const json &body) {
    if (!body.is_object()) throw Error::bad_request("the body must be a JSON object");
    no_unknown_fields(body, {"url", "allowed_proxy_countries"});
    return lookup_fields(body);
}

ResolveRequest parse_resolve(const json &body) {
    if (!body.is_object()) throw Error::bad_request("the body must be a JSON object");
    no_unknown_fields(body, {"url", "allowed_proxy_countries", "intent"});
    ResolveRequest r;
    r.lookup = lookup_fields(body);
    if (body.contains("intent") && !body["intent"].is_null()) {
        if (!body["intent"].is_string()) throw Error::invalid("intent", "must be a string");
        std::string i = body["intent"].get<std::string>();
        if (i.empty() || i.size() > 1000) throw Error::invalid("intent", "must be 1 to 1000 characters");
        if (r.lookup.target.scheme != "https") throw Error::invalid("intent", "requires an https url");
        r.intent = i;
    }
    return r;
}

std::string Candidate::key() const {
    return std::string(headless ? "headless" : "headful") + "|" + (stealth ? "stealth" : "plain") + "|" +
           (proxy_id.empty() ? "direct" : "proxy:" + proxy_id);
}

std::string Candidate::label() const {
    return std::string(headless ? "headless" : "headful") + (stealth ? " + stealth" : "") +
           (proxy_id.empty() ? " + direct" : " + proxy " + (proxy_name.empty() ? proxy_id : proxy_name));
}

std::vector<Candidate> candidates(const std::vector<ProxyOffer> &proxies, bool try_headful) {
    std::vector<Candidate> out;
    auto add = [&](const ProxyOffer *p, int proxy_rank) {
        for (int headful = 0; headful <= (try_headful ? 1 : 0); ++headful)
            for (int stealth = 0; stealth <= 1; ++stealth) {
                Candidate c;
                c.headless = headful == 0;
                c.stealth = stealth == 1;
                if (p) {
                    c.proxy_id = p->id;
                    c.proxy_name = p->name;
                    c.country = p->country;
                    json create = {{"type", p->type}};
                    if (!p->name.empty()) create["name"] = p->name;
                    if (!p->protocol.empty()) create["protocol"] = p->protocol;
                    if (p->config.is_object() && !p->config.empty()) create["config"] = p->config;
                    c.proxy_recipe = {{"mode", "managed"}, {"create", create}};
                } else {
                    c.proxy_recipe = {{"mode", "direct"}};
                }
                c.cost = proxy_rank * 4 + headful * 2 + stealth;
                out.push_back(std::move(c));
            }
    };
    add(nullptr, 0);
    for (std::size_t i = 0; i < proxies.size(); ++i)
        add(&proxies[i], 1 + static_cast<int>(i));
    std::stable_sort(out.begin(), out.end(), [](const Candidate &a, const Candidate &b) { return a.cost < b.cost; });
    return out;
}

std::vector<std::vector<Candidate>> batches(const std::vector<Candidate> &all, int parallelism) {
    parallelism = std::max(1, parallelism);
    std::vector<std::vector<Candidate>> out;
    for (std::size_t i = 0; i < all.size(); i += static_cast<std::size_t>(parallelism))
        out.emplace_back(
            all.begin() + static_cast<std::ptrdiff_t>(i),
            all.begin() + static_cast<std::ptrdiff_t>(std::min(all.size(), i + static_cast<std::size_t>(parallelism))));
    return out;
}

const char *verdict_name(Verdict v) {
    switch (v) {
    case Verdict::accessed:
        return "accessed";
    case Verdict::blocked:
        return "blocked";
    default:
        return "inconclusive";
    }
}

Classified classify(const Load &l) {
    if (!l.error.empty()) return {Verdict::inconclusive, "the page did not load: " + l.error};
    if (!l.verdict.empty()) {
        if (l.verdict == "bot" || l.verdict == "blocked" || l.verdict == "automation")
            return {Verdict::blocked, "the page's bot detection said " + l.verdict};
        if (l.verdict == "human" || l.verdict == "ok" || l.verdict == "allowed")
            return {Verdict::accessed, "the page's bot detection said " + l.verdict};
    }
    if (l.status && (*l.status == 403 || *l.status == 429 || *l.status == 407 || *l.status == 401))
        return {Verdict::blocked, "HTTP " + std::to_string(*l.status)};
    const std::string hay = lower(l.title + "\n" + l.text);
    static const std::array<const char *, 10> kChallenge = {
        "just a moment",        "attention required",
        "verify you are human", "are you a robot",
        "access denied",        "automated browser",
        "bot detected",         "checking your browser",
        "unusual traffic from", "please enable js and disable any ad blocker"};
    for (const char *m : kChallenge)
        if (hay.find(m) != std::string::npos) return {Verdict::blocked, std::string("the page says \"") + m + "\""};
    if (l.status && *l.status >= 500) return {Verdict::inconclusive, "HTTP " + std::to_string(*l.status)};
    if (l.status && *l.status >= 400) return {Verdict::blocked, "HTTP " + std::to_string(*l.status)};
    if (!l.status) return {Verdict::inconclusive, "no HTTP status was read"};
    return {Verdict::accessed, "HTTP " + std::to_string(*l.status)};
}

Load load_from_json(const json &p) {
    Load l;
    auto str = [&](const char *k, std::size_t cap) {
        if (!p.contains(k) || !p[k].is_string()) return std::string();
        std::string s = p[k].get<std::string>();
        return s.size() > cap ? s.substr(0, cap) : s;
    };
    if (p.contains("status") && p["status"].is_number_integer() && p["status"].get<int>() > 0)
        l.status = p["status"].get<int>();
    l.error = str("error", 200);
    l.title = str("title", 200);
    l.text = str("text", 4000);
    l.verdict = lower(str("verdict", 40));
    return l;
}

json run_json(const Run &r) {
    return {{"key", r.candidate.key()},
            {"headless", r.candidate.headless},
            {"stealth", r.candidate.stealth},
            {"proxy_id", r.candidate.proxy_id},
            {"proxy_name", r.candidate.proxy_name},
            {"proxy", r.candidate.proxy_recipe},
            {"country", r.candidate.country},
            {"cost", r.candidate.cost},
            {"verdict", verdict_name(r.verdict)},
            {"reason", r.reason},
            {"observed_at", r.observed_at},
            {"evidence", r.evidence}};
}

Run run_from_json(const json &j) {
    Run r;
    r.candidate.headless = j.value("headless", true);
    r.candidate.stealth = j.value("stealth", false);
    r.candidate.proxy_id = j.value("proxy_id", "");
    r.candidate.proxy_name = j.value("proxy_name", "");
    r.candidate.proxy_recipe = j.value("proxy", json{{"mode", "direct"}});
    r.candidate.country = j.value("country", "");
    r.candidate.cost = j.value("cost", 0);
    const std::string v = j.value("verdict", "inconclusive");
    r.verdict = v == "accessed" ? Verdict::accessed : v == "blocked" ? Verdict::blocked : Verdict::inconclusive;
    r.reason = j.value("reason", "");
    r.observed_at = j.value("observed_at", std::int64_t{0});
    r.evidence = j.value("evidence", json::object());
    return r;
}

double Aggregate::success_rate() const {
    return sample_size() == 0 ? 0.0 : static_cast<double>(accessed) / static_cast<double>(sample_size());
}

std::vector<Aggregate> aggregate(const std::vector<std::vector<Run>> &analyses) {
    std::map<std::string, Aggregate> by;
    std::vector<std::string> order;
    for (const auto &runs : analyses) {
        std::map<std::string, bool> seen;
        for (const auto &r : runs) {
            auto key = r.candidate.key();
            auto [it, fresh] = by.try_emplace(key);
            if (fresh) {
                it->second.candidate = r.candidate;
                order.push_back(key);
            }
            Aggregate &a = it->second;
            if (!seen[key]) ++a.run_count;
            seen[key] = true;
            (r.verdict == Verdict::accessed  ? a.accessed
             : r.verdict == Verdict::blocked ? a.blocked
                                             : a.inconclusive)++;
            a.last_observed_at = std::max(a.last_observed_at, r.observed_at);
            if (r.verdict == Verdict::accessed) a.last_supported_at = std::max(a.last_supported_at, r.observed_at);
        }
    }
    std::vector<Aggregate> out;
    out.reserve(order.size());
    for (const auto &k : order)
        out.push_back(by[k]);
    return out;
}

std::vector<Aggregate> working(const std::vector<Aggregate> &all,
                               const std::optional<std::vector<std::string>> &countries) {
    std::vector<Aggregate> out;
    for (const auto &a : all) {
        if (a.accessed == 0 || a.success_rate() < 0.5) continue;
        if (countries && !a.candidate.proxy_id.empty() &&
            std::find(countries->begin(), countries->end(), a.candidate.country) == countries->end())
            continue;
        out.push_back(a);
    }
    std::stable_sort(out.begin(), out.end(), [](const Aggregate &a, const Aggregate &b) {
        if (a.candidate.cost != b.candidate.cost) return a.candidate.cost < b.candidate.cost;
        return a.success_rate() > b.success_rate();
    });
    return out;
}

json recommendation_json(const Aggregate &a, const std::string &scope, const std::string &matched) {
    json evidence = {{"accessed", a.accessed},
                     {"blocked", a.blocked},
                     {"inconclusive", a.inconclusive},
                     {"run_count", a.run_count},
                     {"sample_size", a.sample_size()},
                     {"success_rate", a.sample_size() == 0 ? 1.0 : a.success_rate()},
                     {"last_observed_at", rfc3339(a.last_observed_at)}};
    if (a.last_supported_at > 0) evidence["last_supported_at"] = rfc3339(a.last_supported_at);
    return {{"type", "recommendation"},
            {"browser",
             {{"gpu", false},
              {"headless", a.candidate.headless},
              {"stealth", a.candidate.stealth},
              {"viewport", {{"width", 1920}, {"height", 1080}, {"refresh_rate", 25}}}}},
            {"proxy", a.candidate.proxy_recipe.is_object() ? a.candidate.proxy_recipe : json{{"mode", "direct"}}},
            {"evidence", evidence},
            {"match_scope", scope},
            {"matched_target", matched}};
}

json no_recommendation(const std::string &code, const std::string &message) {
    return {{"type", "no_recommendation"}, {"code", code}, {"message", message}};
}

std::optional<std::string> match_scope(const Target &asked, const Target &known) {
    if (asked.normalized == known.normalized) return "exact";
    if (asked.host == known.host) return "host";
    if (asked.domain == known.domain) return "domain";
    return std::nullopt;
}

std::vector<Seed> parse_seed(const json &file, std::int64_t loaded_at) {
    if (!file.is_array()) throw std::invalid_argument("the seed file must be a JSON array");
    std::vector<Seed> out;
    for (const auto &e : file) {
        if (!e.is_object() || !e.contains("target") || !e["target"].is_string())
            throw std::invalid_argument("each seed entry needs a \"target\" URL");
        Seed s;
        try {
            s.target = normalize(e["target"].get<std::string>());
        } catch (const Error &err) {
            throw std::invalid_argument("seed target " + e["target"].get<std::string>() + ": " + err.what());
        }
        s.match = e.value("match", "exact");
        if (s.match != "exact" && s.match != "host" && s.match != "domain")
            throw std::invalid_argument("seed match must be exact, host or domain");
        json b = e.value("browser", json::object());
        s.candidate.headless = b.value("headless", true);
        s.candidate.stealth = b.value("stealth", false);
        s.candidate.proxy_recipe = e.value("proxy", json{{"mode", "direct"}});
        if (!s.candidate.proxy_recipe.is_object() || !s.candidate.proxy_recipe.contains("mode"))
            throw std::invalid_argument("seed proxy must be {mode: direct} or {mode: managed, create: {...}}");
        if (s.candidate.proxy_recipe["mode"] != "direct") {
            s.candidate.proxy_id = "seed";
            s.candidate.country = lower(s.candidate.proxy_recipe.value("create", json::object())
                                            .value("config", json::object())
                                            .value("country", ""));
            std::transform(s.candidate.country.begin(), s.candidate.country.end(), s.candidate.country.begin(),
                           [](unsigned char c) { return std::toupper(c); });
        }
        s.candidate.cost =
            (s.candidate.proxy_id.empty() ? 0 : 4) + (s.candidate.headless ? 0 : 2) + (s.candidate.stealth ? 1 : 0);
        json ev = e.value("evidence", json::object());
        s.evidence.candidate = s.candidate;
        s.evidence.accessed = ev.value("accessed", 0);
        s.evidence.blocked = ev.value("blocked", 0);
        s.evidence.inconclusive = ev.value("inconclusive", 0);
        s.evidence.run_count = ev.value("run_count", 0);
        s.evidence.last_observed_at = loaded_at;
        out.push_back(std::move(s));
    }
    return out;
}

} // namespace hangar::config_registry
