// The config registry's pure decisions (kernel-api-0131.md §1D): targets, requests, the candidate
// configurations an analysis tries, the verdict of one page load, evidence and the cheapest pass,
// and which knowledge answers a lookup (exact target, then host, then registrable domain).
#pragma once

#include <hangar/plugin.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hangar::config_registry {

struct Target {
    std::string normalized; // scheme://host[:port]/path, no query or fragment
    std::string scheme, host, domain;
    std::uint16_t port = 0;
};

// 400 naming `url` unless an http(s) URL with a host. No DNS.
Target normalize(const std::string &url);
json target_json(const Target &t);
// Literal addresses that are not public ("127.0.0.1", "[::1]", "10.1.2.3"); names are not resolved.
bool literal_non_public(const std::string &host);

struct LookupRequest {
    Target target;
    std::optional<std::vector<std::string>> countries; // upper-case ISO 3166 alpha-2
};
struct ResolveRequest {
    LookupRequest lookup;
    std::optional<std::string> intent;
};
LookupRequest parse_lookup(const json &body);
ResolveRequest parse_resolve(const json &body);

// One configuration an analysis tries. Its cost orders the cheapest first: headless before
// headful, no stealth before stealth, direct before any proxy (a proxy costs the most: its
// traffic, its latency, an account somewhere).
struct Candidate {
    bool headless = true;
    bool stealth = false;
    std::string proxy_id;   // empty: direct
    std::string proxy_name; // for the recipe and the label
    json proxy_recipe;      // {mode: direct} or {mode: managed, create: {...}} (no secrets)
    std::string country;    // of the proxy, when its config names one
    int cost = 0;
    std::string key() const; // "headless|stealth|direct" / "headful|plain|proxy:<id>"
    std::string label() const;
};
struct ProxyOffer {
    std::string id, name, type, protocol, country;
    json config; // without secrets
};
// Every candidate in cost order: headless/headful × stealth off/on × direct and each proxy.
std::vector<Candidate> candidates(const std::vector<ProxyOffer> &proxies, bool try_headful);
// Candidates grouped in batches of `parallelism`, cheapest first: a batch with a pass ends the
// run (every cheaper candidate has already run).
std::vector<std::vector<Candidate>> batches(const std::vector<Candidate> &all, int parallelism);

// What the instance read back after loading the page.
struct Load {
    std::optional<int> status; // the main document's HTTP status
    std::string error;         // a navigation error (net::ERR_…)
    std::string title, text;   // bounded by the probe
    std::string verdict;       // a bot-detection verdict the page exposes, lower-case
};
enum class Verdict { accessed, blocked, inconclusive };
struct Classified {
    Verdict verdict;
    std::string reason;
};
Classified classify(const Load &l);
const char *verdict_name(Verdict v);
Load load_from_json(const json &probe);

// One candidate's outcome in one analysis.
struct Run {
    Candidate candidate;
    Verdict verdict = Verdict::inconclusive;
    std::string reason;
    std::int64_t observed_at = 0;
    json evidence; // {status, title, error} (bounded)
};
json run_json(const Run &r);
Run run_from_json(const json &j);

// The evidence of one configuration over every run that tried it.
struct Aggregate {
    Candidate candidate;
    int accessed = 0, blocked = 0, inconclusive = 0, run_count = 0;
    std::int64_t last_observed_at = 0, last_supported_at = 0;
    double success_rate() const;
    int sample_size() const { return accessed + blocked + inconclusive; }
};
// Runs grouped by configuration, one run per analysis counted in run_count (analyses are the
// outer vector).
std::vector<Aggregate> aggregate(const std::vector<std::vector<Run>> &analyses);
// Configurations that worked (accessed at least once, success rate ≥ 0.5), cheapest first,
// restricted to proxies in `countries` when given (a proxy of unknown country then does not qualify).
std::vector<Aggregate> working(const std::vector<Aggregate> &all,
                               const std::optional<std::vector<std::string>> &countries);
json recommendation_json(const Aggregate &a, const std::string &scope, const std::string &matched);
json no_recommendation(const std::string &code, const std::string &message);

// Scope of a piece of knowledge for a target: exact target, same host, same registrable domain.
std::optional<std::string> match_scope(const Target &asked, const Target &known);

// An operator seed entry (seed file): {target, match?: exact|host|domain, browser, proxy?, evidence?}.
struct Seed {
    Target target;
    std::string match = "exact";
    Candidate candidate;
    Aggregate evidence;
};
std::vector<Seed> parse_seed(const json &file, std::int64_t loaded_at);

} // namespace hangar::config_registry
