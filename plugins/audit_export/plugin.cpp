// audit_export: continuous delivery of the organisation's audit log to S3-compatible buckets
// (kernel-api-0131.md §1F, /audit-logs/export/destinations). See README.md for why it is a plugin
// of its own and how "no entry lost or sent twice" is kept across restarts and nodes.
#include "audit_export_model.hpp"

#include <hangar/egress.hpp>
#include <hangar/gzip.hpp>
#include <hangar/metrics.hpp>
#include <hangar/outbound.hpp>
#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>
#include <hangar/secrets.hpp>
#include <hangar/sigv4.hpp>

#include <Poco/Net/SSLManager.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
namespace ax = hangar::audit_export;

const hangar_migration kMigrations[] = {
    {1, "CREATE TABLE audit_export_destinations (id TEXT PRIMARY KEY, org_id TEXT NOT NULL, bucket TEXT NOT NULL, "
        "prefix TEXT NOT NULL, region TEXT NOT NULL, role_arn TEXT NOT NULL, kms_key_id TEXT, sse TEXT NOT NULL, "
        "endpoint TEXT, access_key_id TEXT, secret_sealed TEXT, status TEXT NOT NULL, external_id TEXT NOT NULL, "
        "consecutive_failures INTEGER NOT NULL DEFAULT 0, last_error TEXT, last_error_at BIGINT, "
        "last_success_at BIGINT, next_attempt_at BIGINT, cursor_seq BIGINT, pending_seq BIGINT, active_since BIGINT, "
        "version INTEGER NOT NULL DEFAULT 1, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, "
        "deleted_at BIGINT);"
        "CREATE INDEX audit_export_destinations_org ON audit_export_destinations (org_id, deleted_at, created_at);"
        "CREATE TABLE audit_export_lease (name TEXT PRIMARY KEY, node TEXT NOT NULL, expires_at BIGINT NOT NULL);"
        "INSERT INTO secret_columns (owner, table_name, id_column, column_name) VALUES "
        "('audit_export', 'audit_export_destinations', 'id', 'secret_sealed');"},
};

const char *const kFields[] = {"type",
                               "format",
                               "bucket",
                               "prefix",
                               "region",
                               "role_arn",
                               "kms_key_id",
                               "status",
                               "endpoint",
                               "access_key_id",
                               "secret_access_key",
                               "sse"};

struct Caller {
    std::string org;
    explicit Caller(const Request &req) {
        json c = req.caller();
        org = c.value("org_id", "");
        if (org.empty()) throw Error::unauthorized("no organisation for this caller");
        // The audit log is the organisation's: a project-scoped key neither reads nor ships it.
        if (c.value("project_scoped", false))
            throw Error::forbidden("audit-log export belongs to the organisation: a project-scoped API key cannot "
                                   "use it");
    }
};

// STS would not give the role's keys (its error <Code> in the message; no secret in it).
struct AssumeRoleFailed : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class AuditExportPlugin final : public hangar::Plugin {
public:
    void start_server() override {
        secrets_ = std::make_unique<hangar::Secrets>(
            hangar::secrets::key_file(config("secrets.key_file"), config("server.data_dir")));
        policy_ = hangar::egress::Policy::parse(config("server.fetch_allow", ""),
                                                config_bool("server.fetch_allow_private_networks", false));
        interval_ = std::chrono::milliseconds(std::clamp<std::int64_t>(config_int("interval_ms", 10000), 100, 3600000));
        settle_ms_ = std::clamp<std::int64_t>(config_int("settle_ms", 2000), 0, 600000);
        max_entries_ =
            static_cast<std::size_t>(std::clamp<std::int64_t>(config_int("object_entries", 5000), 1, 100000));
        timeout_ = std::chrono::milliseconds(std::clamp<std::int64_t>(config_int("timeout_ms", 15000), 100, 120000));
        lease_ms_ =
            std::clamp<std::int64_t>(config_int("lease_ms", std::max<std::int64_t>(30000, 3 * interval_.count())),
                                     3 * interval_.count(), 3600000);
        // Role assumption: the operator's own AWS identity, which tenants' roles trust (with their
        // destination's external id), and the STS endpoint it asks.
        sts_.access_key_id = config("assume_role_access_key_id", "");
        sts_.secret_access_key = config("assume_role_secret_access_key", "");
        sts_.endpoint = config("sts_endpoint", "");
        sts_.principal_arn = config("assume_role_principal_arn", "");
        Poco::Net::initializeSSL();
        routes();
        service("audit_export.metrics", [this](const json &) { return metrics(); });
        shipper_ = std::jthread([this](const std::stop_token &st) { ship_loop(st); });
    }
    void stop_server() override {
        shipper_ = {};
        Poco::Net::uninitializeSSL();
    }

private:
    // ---- the API ------------------------------------------------------------------------------
    void routes();
    json render(const json &row) const;
    json require(const Caller &c, const std::string &id) const;
    void check_endpoint(const std::string &endpoint) const;

    // ---- delivery -----------------------------------------------------------------------------
    void ship_loop(const std::stop_token &stop);
    bool hold_lease();
    void ship(const json &row, const std::stop_token &stop);
    // PUT (or DELETE with an empty body) of one object; the status, or throws outbound::Failure.
    int s3_request(const json &row, const std::string &method, const std::string &key, const std::string &body,
                   std::string *error_body = nullptr) const;
    void failed(const std::string &id, const std::string &error_class, int failures);
    json metrics() const;

    // The keys a request is signed with: the destination's static keys, or the role's temporary
    // ones (assumed, then kept until five minutes before they expire).
    hangar::sigv4::Credentials credentials(const json &row) const;
    struct Sts {
        std::string access_key_id, secret_access_key, endpoint, principal_arn;
        bool configured() const { return !access_key_id.empty() && !secret_access_key.empty(); }
    } sts_;
    mutable std::mutex assumed_mutex_;
    mutable std::map<std::string, ax::AssumedRole> assumed_; // destination id + role → keys

    std::unique_ptr<hangar::Secrets> secrets_;
    hangar::egress::Policy policy_;
    std::chrono::milliseconds interval_{10000}, timeout_{15000};
    std::int64_t settle_ms_ = 2000, lease_ms_ = 30000;
    std::size_t max_entries_ = 5000;
    std::jthread shipper_;
    std::mutex wake_mutex_;
    std::condition_variable_any wake_;

    mutable std::mutex stats_mutex_;
    struct Stats {
        std::uint64_t entries = 0, objects = 0, failures = 0;
    };
    std::map<std::string, Stats> stats_;
};

json AuditExportPlugin::render(const json &row) const {
    auto time = [&](const char *k) {
        return row[k].is_number() ? json(hangar::rfc3339(row[k].get<std::int64_t>())) : json(nullptr);
    };
    json out = {{"id", row["id"]},
                {"type", "s3"},
                {"format", "jsonl.gz"},
                {"bucket", row["bucket"]},
                {"prefix", row["prefix"]},
                {"region", row["region"]},
                {"role_arn", row["role_arn"]},
                {"status", row["status"]},
                {"external_id", row["external_id"]},
                // The principal the role's trust policy names (the operator's; "" when Hangar
                // assumes no roles and signs with static keys only).
                {"kernel_role_arn", sts_.principal_arn},
                {"consecutive_failures", row.value("consecutive_failures", std::int64_t{0})},
                {"created_at", hangar::rfc3339(row["created_at"].get<std::int64_t>())},
                {"updated_at", hangar::rfc3339(row["updated_at"].get<std::int64_t>())},
                // Hangar's additions: where an S3-compatible server is, and which key id signs.
                {"sse", row["sse"]},
                {"endpoint", row["endpoint"]},
                {"access_key_id", row["access_key_id"]},
                {"has_secret_access_key", row["secret_sealed"].is_string()}};
    if (row["kms_key_id"].is_string()) out["kms_key_id"] = row["kms_key_id"];
    if (row["last_error"].is_string()) out["last_error"] = row["last_error"];
    for (const char *k : {"last_error_at", "last_success_at", "next_attempt_at"})
        if (row[k].is_number()) out[k] = time(k);
    if (row["cursor_seq"].is_number())
        out["last_exported_cursor"] = ax::cursor_text(row["cursor_seq"].get<std::int64_t>());
    return out;
}

json AuditExportPlugin::require(const Caller &c, const std::string &id) const {
    json rows =
        sql("SELECT * FROM audit_export_destinations WHERE id = ? AND org_id = ? AND deleted_at IS NULL", {id, c.org});
    if (rows.empty()) throw Error::not_found("audit-log export destination not found");
    return rows[0];
}

void AuditExportPlugin::check_endpoint(const std::string &endpoint) const {
    auto scheme_end = endpoint.find("://");
    const std::string scheme = scheme_end == std::string::npos ? "" : endpoint.substr(0, scheme_end);
    if ((scheme != "http" && scheme != "https") || endpoint.find_first_of("?#@ ") != std::string::npos)
        throw Error::invalid("endpoint", "must be an http(s) URL without user info, query or fragment");
    auto a = ax::s3_address(endpoint, "", "b", "k");
    std::string host = a.host;
    std::uint16_t port = scheme == "https" ? 443 : 80;
    if (auto colon = host.rfind(':'); colon != std::string::npos && host.find(']') == std::string::npos) {
        try {
            port = static_cast<std::uint16_t>(std::stoi(host.substr(colon + 1)));
        } catch (const std::exception &) {
            throw Error::invalid("endpoint", "has a malformed port");
        }
        host = host.substr(0, colon);
    }
    if (host.empty()) throw Error::invalid("endpoint", "must name a host");
    try {
        hangar::egress::resolve(host, port, policy_);
    } catch (const hangar::egress::Refused &e) {
        throw Error::invalid("endpoint",
                             std::string("must resolve to an address this server may send to: ") + e.what());
    } catch (const hangar::egress::ResolveError &e) {
        throw Error::invalid("endpoint", std::string("does not resolve: ") + e.what());
    }
}

void AuditExportPlugin::routes() {
    route("GET", "/audit-logs/export/destinations", [this](Request &req, Response &res) {
        Caller c(req);
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v, 20, 100);
        v.throw_if_failed("invalid audit-log export destinations query");
        hangar::answer_page(
            res, [this](const std::string &q, const json &p) { return sql(q, p); },
            "SELECT * FROM audit_export_destinations WHERE org_id = ? AND deleted_at IS NULL ORDER BY created_at, id",
            json::array({c.org}), paging, [this](const json &row) { return render(row); });
    });
    route("POST", "/audit-logs/export/destinations", [this](Request &req, Response &res) {
        Caller c(req);
        json body = req.json_body();
        for (const auto &[k, _] : body.items())
            if (std::find(std::begin(kFields), std::end(kFields), k) == std::end(kFields) || k == "status")
                throw Error::invalid(k, "is not an audit-log export destination field");
        for (const char *k : {"type", "format", "bucket", "prefix", "region", "role_arn"})
            if (!body.contains(k)) throw Error::invalid(k, "is required");
        if (body["type"] != "s3") throw Error::invalid("type", "must be s3");
        if (body["format"] != "jsonl.gz") throw Error::invalid("format", "must be jsonl.gz");
        const std::string bucket = ax::check_bucket(body["bucket"], "bucket");
        const std::string prefix = ax::check_prefix(body["prefix"], "prefix");
        const std::string region = ax::check_region(body["region"], "region");
        json kms = body.value("kms_key_id", json());
        if (!kms.is_null() && !kms.is_string()) throw Error::invalid("kms_key_id", "must be a string");
        if (kms.is_string() && kms.get<std::string>().empty()) kms = nullptr;
        std::string sse =
            body.contains("sse") ? ax::check_sse(body["sse"], "sse") : (kms.is_string() ? "aws:kms" : "AES256");
        json endpoint = body.value("endpoint", json());
        if (!endpoint.is_null()) {
            if (!endpoint.is_string()) throw Error::invalid("endpoint", "must be a string");
            check_endpoint(endpoint.get<std::string>());
        }
        json key_id = body.value("access_key_id", json()), secret = body.value("secret_access_key", json());
        if (key_id.is_string() != secret.is_string() || (!key_id.is_null() && !key_id.is_string()) ||
            (!secret.is_null() && !secret.is_string()))
            throw Error::invalid(key_id.is_string() ? "secret_access_key" : "access_key_id",
                                 "static keys need both access_key_id and secret_access_key (strings)");
        // Without static keys Hangar assumes role_arn, which the operator must have set up.
        if (!key_id.is_string()) {
            if (!sts_.configured())
                throw Error::not_implemented(
                    "this Hangar server assumes no roles (audit_export.ini assume_role_access_key_id and "
                    "assume_role_secret_access_key are unset): give static keys (access_key_id, secret_access_key) "
                    "of a user that may PutObject");
            ax::check_role_arn(body["role_arn"], "role_arn");
        } else if (!body["role_arn"].is_string()) {
            throw Error::invalid("role_arn", "must be a string");
        }
        const std::string id = hangar::new_id();
        const auto now = hangar::now_ms();
        sql("INSERT INTO audit_export_destinations (id, org_id, bucket, prefix, region, role_arn, kms_key_id, sse, "
            "endpoint, access_key_id, secret_sealed, status, external_id, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'paused', ?, ?, ?)",
            {id, c.org, bucket, prefix, region, body["role_arn"], kms, sse, endpoint, key_id,
             secret.is_string() ? json(secrets_->seal(secret.get<std::string>())) : json(nullptr),
             "hangar-" + hangar::new_id(), now, now});
        res.json(render(require(c, id)));
    });
    route("GET", "/audit-logs/export/destinations/{id}",
          [this](Request &req, Response &res) { res.json(render(require(Caller(req), req.param("id")))); });
    route("PATCH", "/audit-logs/export/destinations/{id}", [this](Request &req, Response &res) {
        Caller c(req);
        json row = require(c, req.param("id"));
        json body = req.json_body();
        for (const auto &[k, _] : body.items())
            if (std::find(std::begin(kFields), std::end(kFields), k) == std::end(kFields) || k == "type" ||
                k == "format")
                throw Error::invalid(k, "is not a field that can be changed");
        auto given = [&](const char *k) { return body.contains(k) && !body[k].is_null(); };
        json next = row;
        if (given("bucket")) next["bucket"] = ax::check_bucket(body["bucket"], "bucket");
        if (given("prefix")) next["prefix"] = ax::check_prefix(body["prefix"], "prefix");
        if (given("region")) next["region"] = ax::check_region(body["region"], "region");
        if (given("role_arn")) {
            if (!body["role_arn"].is_string()) throw Error::invalid("role_arn", "must be a string");
            if (!row["access_key_id"].is_string()) ax::check_role_arn(body["role_arn"], "role_arn");
            next["role_arn"] = body["role_arn"];
        }
        if (given("kms_key_id")) {
            if (!body["kms_key_id"].is_string()) throw Error::invalid("kms_key_id", "must be a string");
            next["kms_key_id"] = body["kms_key_id"].get<std::string>().empty() ? json(nullptr) : body["kms_key_id"];
        }
        if (given("sse")) next["sse"] = ax::check_sse(body["sse"], "sse");
        if (given("endpoint")) {
            if (!body["endpoint"].is_string()) throw Error::invalid("endpoint", "must be a string");
            check_endpoint(body["endpoint"].get<std::string>());
            next["endpoint"] = body["endpoint"];
        }
        if (given("access_key_id") != given("secret_access_key") ||
            (given("access_key_id") && (!body["access_key_id"].is_string() || !body["secret_access_key"].is_string())))
            throw Error::invalid("access_key_id", "static keys are changed together (access_key_id and "
                                                  "secret_access_key, strings)");
        if (given("access_key_id")) {
            next["access_key_id"] = body["access_key_id"];
            next["secret_sealed"] = secrets_->seal(body["secret_access_key"].get<std::string>());
        }
        json cursor = row["cursor_seq"], pending = row["pending_seq"], since = row["active_since"];
        if (given("status")) {
            if (body["status"] != "active" && body["status"] != "paused")
                throw Error::invalid("status", "must be active or paused");
            // Export starts at activation: what was recorded while paused is never exported.
            if (body["status"] == "active" && row["status"] != "active") {
                // An entry still on its way to the store may get a higher seq: its time decides.
                since = hangar::now_ms();
                cursor = call("org.audit_entries", {{"op", "max_seq"}, {"org_id", c.org}}).value("max_seq", 0);
                pending = nullptr;
            }
            next["status"] = body["status"];
        }
        // The row's version guards against a concurrent change (and the shipper's cursor moves,
        // which do not bump it, are kept unless this PATCH activates).
        json updated = sql(
            "UPDATE audit_export_destinations SET bucket = ?, prefix = ?, region = ?, role_arn = ?, kms_key_id = ?, "
            "sse = ?, endpoint = ?, access_key_id = ?, secret_sealed = ?, status = ?, "
            "cursor_seq = CASE WHEN ? THEN ? ELSE cursor_seq END, pending_seq = CASE WHEN ? THEN NULL ELSE pending_seq "
            "END, "
            "consecutive_failures = CASE WHEN ? THEN 0 ELSE consecutive_failures END, next_attempt_at = NULL, "
            "active_since = ?, "
            "version = version + 1, updated_at = ? WHERE id = ? AND version = ? RETURNING id",
            {next["bucket"], next["prefix"], next["region"], next["role_arn"], next["kms_key_id"], next["sse"],
             next["endpoint"], next["access_key_id"], next["secret_sealed"], next["status"],
             cursor != row["cursor_seq"] ? 1 : 0, cursor, pending.is_null() && !row["pending_seq"].is_null() ? 1 : 0,
             cursor != row["cursor_seq"] ? 1 : 0, since, hangar::now_ms(), row["id"], row["version"]});
        if (updated.empty()) throw Error::conflict("the destination changed meanwhile: read it again and retry");
        { std::lock_guard lock(wake_mutex_); }
        wake_.notify_all();
        res.json(render(require(c, row["id"].get<std::string>())));
    });
    route("DELETE", "/audit-logs/export/destinations/{id}", [this](Request &req, Response &res) {
        Caller c(req);
        json row = require(c, req.param("id"));
        // Soft: an upload under way may still finish; nothing new starts.
        sql("UPDATE audit_export_destinations SET deleted_at = ?, status = 'paused' WHERE id = ?",
            {hangar::now_ms(), row["id"]});
        res.no_content();
    });
    route("POST", "/audit-logs/export/destinations/{id}/test", [this](Request &req, Response &res) {
        Caller c(req);
        json row = require(c, req.param("id"));
        // A probe object with real-delivery settings (key layout, SSE, credentials), then removed.
        const std::string key =
            (row["prefix"].get<std::string>().empty() ? "" : row["prefix"].get<std::string>() + "/") +
            "destination_id=" + row["id"].get<std::string>() + "/_hangar_probe/" + hangar::new_id() + ".jsonl.gz";
        auto failure = [&](const std::string &message) {
            res.json({{"stage", "put_object"},
                      {"success", false},
                      {"error", {{"code", "put_object_failed"}, {"message", message}}}});
        };
        try {
            std::string error;
            int status = s3_request(row, "PUT", key, hangar::gzip("{\"probe\":true}\n"), &error);
            if (status < 200 || status >= 300)
                return failure("the bucket answered HTTP " + std::to_string(status) +
                               (error.empty() ? "" : ": " + error));
            s3_request(row, "DELETE", key, {});
        } catch (const hangar::outbound::Failure &f) {
            return failure(f.what());
        } catch (const AssumeRoleFailed &f) {
            return res.json({{"stage", "assume_role"},
                             {"success", false},
                             {"error", {{"code", "assume_role_failed"}, {"message", f.what()}}}});
        }
        res.json({{"stage", "complete"}, {"success", true}});
    });
}

int AuditExportPlugin::s3_request(const json &row, const std::string &method, const std::string &key,
                                  const std::string &body, std::string *error_body) const {
    const std::string endpoint = row["endpoint"].is_string() ? row["endpoint"].get<std::string>() : "";
    const std::string region = row["region"].get<std::string>();
    auto addr = ax::s3_address(endpoint, region, row["bucket"].get<std::string>(), key);
    const hangar::sigv4::Credentials creds = credentials(row);
    const std::string date = hangar::sigv4::amz_date(std::chrono::system_clock::now());
    hangar::sigv4::Request sr;
    sr.method = method;
    sr.path = addr.path;
    sr.payload_hash = hangar::sigv4::sha256_hex(body);
    sr.headers = {{"host", addr.host}, {"x-amz-date", date}, {"x-amz-content-sha256", sr.payload_hash}};
    if (!creds.session_token.empty()) sr.headers.emplace_back("x-amz-security-token", creds.session_token);
    if (method == "PUT") {
        for (auto &h : ax::sse_headers(row["sse"].get<std::string>(),
                                       row["kms_key_id"].is_string() ? row["kms_key_id"].get<std::string>() : ""))
            sr.headers.push_back(std::move(h));
        sr.headers.emplace_back("content-type", "application/gzip");
    }
    hangar::outbound::Request r;
    r.method = method;
    r.url = addr.scheme_host + hangar::sigv4::uri_encode(addr.path, true);
    r.timeout = timeout_;
    for (const auto &[k, v] : sr.headers)
        if (k != "host" && k != "content-type") r.headers.emplace_back(k, v);
    r.headers.emplace_back("Authorization", hangar::sigv4::authorization(sr, creds, date, region, "s3"));
    if (method == "PUT") {
        r.content_type = "application/gzip";
        r.body = body;
    }
    auto answer = hangar::outbound::send(r, policy_, 4096);
    if (error_body) {
        // S3's error document names a <Code>; the rest (request ids, the key) stays out.
        auto at = answer.body.find("<Code>"), end = answer.body.find("</Code>");
        if (at != std::string::npos && end != std::string::npos && end > at)
            *error_body = answer.body.substr(at + 6, std::min<std::size_t>(end - at - 6, 64));
    }
    return answer.status;
}

hangar::sigv4::Credentials AuditExportPlugin::credentials(const json &row) const {
    if (row["access_key_id"].is_string())
        return {row["access_key_id"].get<std::string>(), secrets_->open(row["secret_sealed"].get<std::string>()), ""};
    if (!sts_.configured()) throw AssumeRoleFailed("this server assumes no roles (audit_export.ini assume_role_*)");
    const std::string role = row["role_arn"].get<std::string>(), cache_key = row["id"].get<std::string>() + " " + role;
    const auto now = hangar::now_ms();
    {
        std::lock_guard lock(assumed_mutex_);
        if (auto it = assumed_.find(cache_key);
            it != assumed_.end() && it->second.expires_ms - now > std::int64_t{5} * 60 * 1000)
            return {it->second.access_key_id, it->second.secret_access_key, it->second.session_token};
    }
    // STS AssumeRole, signed with the operator's keys; the destination's external id is the
    // condition a role's trust policy checks, so one tenant cannot have Hangar assume another's.
    const std::string region = row["region"].get<std::string>();
    const std::string endpoint = sts_.endpoint.empty() ? "https://sts." + region + ".amazonaws.com" : sts_.endpoint;
    const std::string body = ax::assume_role_body(role, "hangar-audit-export-" + row["id"].get<std::string>(),
                                                  row["external_id"].get<std::string>(), 3600);
    auto addr = ax::s3_address(endpoint, region, "", "");
    const std::string date = hangar::sigv4::amz_date(std::chrono::system_clock::now());
    hangar::sigv4::Request sr;
    sr.method = "POST";
    sr.path = "/";
    sr.payload_hash = hangar::sigv4::sha256_hex(body);
    sr.headers = {{"content-type", "application/x-www-form-urlencoded; charset=utf-8"},
                  {"host", addr.host},
                  {"x-amz-date", date}};
    hangar::outbound::Request r;
    r.method = "POST";
    r.url = addr.scheme_host + "/";
    r.timeout = timeout_;
    r.content_type = "application/x-www-form-urlencoded; charset=utf-8";
    r.body = body;
    r.headers.emplace_back("x-amz-date", date);
    r.headers.emplace_back(
        "Authorization",
        hangar::sigv4::authorization(sr, {sts_.access_key_id, sts_.secret_access_key, ""}, date, region, "sts"));
    auto answer = hangar::outbound::send(r, policy_, std::size_t{64} * 1024);
    auto assumed = ax::parse_assume_role(answer.body, now);
    if (answer.status != 200 || !assumed.error_code.empty())
        throw AssumeRoleFailed(
            "STS AssumeRole of " + role +
            " failed: " + (assumed.error_code.empty() ? "HTTP " + std::to_string(answer.status) : assumed.error_code));
    std::lock_guard lock(assumed_mutex_);
    assumed_[cache_key] = assumed;
    return {assumed.access_key_id, assumed.secret_access_key, assumed.session_token};
}

// Exactly one node ships: the one holding the lease row (renewed each round, taken over once it
// has expired, so a stopped or failed node's turn passes to another within lease_ms).
bool AuditExportPlugin::hold_lease() {
    const auto now = hangar::now_ms();
    const std::string me = node_name().empty() ? "local" : node_name();
    json rows = sql("INSERT INTO audit_export_lease (name, node, expires_at) VALUES ('shipper', ?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET node = excluded.node, expires_at = excluded.expires_at "
                    "WHERE audit_export_lease.node = excluded.node OR audit_export_lease.expires_at < ? RETURNING node",
                    {me, now + lease_ms_, now});
    return !rows.empty();
}

void AuditExportPlugin::ship_loop(const std::stop_token &stop) {
    while (!stop.stop_requested()) {
        try {
            if (hold_lease())
                for (const auto &row :
                     sql("SELECT * FROM audit_export_destinations WHERE status = 'active' AND deleted_at IS NULL "
                         "AND (next_attempt_at IS NULL OR next_attempt_at <= ?)",
                         {hangar::now_ms()})) {
                    if (stop.stop_requested()) break;
                    ship(row, stop);
                }
        } catch (const std::exception &e) {
            warn(std::string("audit-log export: ") + e.what());
        }
        std::unique_lock lock(wake_mutex_);
        wake_.wait_for(lock, stop, interval_, [] { return false; });
    }
}

void AuditExportPlugin::failed(const std::string &id, const std::string &error_class, int failures) {
    // 1 s doubling to 5 min between attempts.
    const std::int64_t wait = std::min<std::int64_t>(300000, 1000LL << std::min(failures, 9));
    sql("UPDATE audit_export_destinations SET consecutive_failures = consecutive_failures + 1, last_error = ?, "
        "last_error_at = ?, next_attempt_at = ? WHERE id = ?",
        {error_class, hangar::now_ms(), hangar::now_ms() + wait, id});
    std::lock_guard lock(stats_mutex_);
    ++stats_[id].failures;
}

// Ships what follows the destination's cursor, one object at a time. Before an object goes out its
// range is recorded (pending_seq): after a crash the same range is built again and written to the
// same key, so an entry is neither lost (the cursor moves only after S3 said yes) nor in two
// objects (the range never changes once chosen).
void AuditExportPlugin::ship(const json &start, const std::stop_token &stop) {
    const std::string id = start["id"].get<std::string>(), org = start["org_id"].get<std::string>();
    for (int round = 0; round < 100 && !stop.stop_requested(); ++round) {
        json rows = sql("SELECT * FROM audit_export_destinations WHERE id = ? AND status = 'active' AND "
                        "deleted_at IS NULL",
                        {id});
        if (rows.empty()) return;
        const json &row = rows[0];
        const std::int64_t cursor = row["cursor_seq"].is_number() ? row["cursor_seq"].get<std::int64_t>() : 0;
        std::vector<ax::Entry> entries;
        json in = {{"org_id", org}, {"after_seq", cursor}, {"limit", max_entries_}};
        const bool resume = row["pending_seq"].is_number();
        if (resume) in["upto_seq"] = row["pending_seq"];
        for (const auto &e : call("org.audit_entries", in).value("entries", json::array()))
            entries.push_back({e["seq"].get<std::int64_t>(), e["ts_ms"].get<std::int64_t>(), e["entry"]});
        const std::int64_t settled_before = hangar::now_ms() - settle_ms_;
        std::size_t n = resume ? entries.size() : ax::chunk_size(entries, settled_before, max_entries_);
        if (n == 0) return;
        // Another object this round only when this one stopped at an hour or at the fetch's
        // limit: entries after one too young to ship are about as young; the next round takes them.
        const bool more =
            resume || (n < entries.size() ? entries[n].ts_ms < settled_before : entries.size() == max_entries_);
        const std::int64_t first = entries.front().seq, last = entries[n - 1].seq;
        if (!resume &&
            sql("UPDATE audit_export_destinations SET pending_seq = ? WHERE id = ? AND pending_seq IS NULL AND "
                "COALESCE(cursor_seq, 0) = ? RETURNING id",
                {last, id, cursor})
                .empty())
            return; // changed meanwhile (a PATCH): the next round starts from what is stored
        const std::string key =
            ax::object_key(row["prefix"].get<std::string>(), id, org, entries.front().ts_ms, first, last);
        // Entries recorded before the activation are passed over, never exported.
        const std::int64_t since = row["active_since"].is_number() ? row["active_since"].get<std::int64_t>() : 0;
        entries.resize(n);
        std::erase_if(entries, [&](const ax::Entry &e) { return e.ts_ms < since; });
        n = entries.size();
        const std::string body = hangar::gzip(ax::jsonl(entries, n));
        if (n > 0) {
            try {
                std::string error;
                int status = s3_request(row, "PUT", key, body, &error);
                if (status < 200 || status >= 300) {
                    failed(id,
                           status == 403   ? "access_denied"
                           : status == 404 ? "no_such_bucket"
                                           : "put_object_failed",
                           row.value("consecutive_failures", 0));
                    return;
                }
            } catch (const hangar::outbound::Failure &f) {
                using Kind = hangar::outbound::Failure::Kind;
                failed(id,
                       f.kind() == Kind::refused   ? "address_refused"
                       : f.kind() == Kind::timeout ? "timeout"
                                                   : "unreachable",
                       row.value("consecutive_failures", 0));
                return;
            } catch (const AssumeRoleFailed &) {
                failed(id, "assume_role_failed", row.value("consecutive_failures", 0));
                return;
            }
        }
        sql("UPDATE audit_export_destinations SET cursor_seq = pending_seq, pending_seq = NULL, "
            "consecutive_failures = 0, last_success_at = ?, next_attempt_at = NULL WHERE id = ? AND pending_seq = ?",
            {hangar::now_ms(), id, last});
        {
            std::lock_guard lock(stats_mutex_);
            stats_[id].entries += n;
            ++stats_[id].objects;
        }
        if (!more) return;
    }
}

json AuditExportPlugin::metrics() const {
    using hangar::metrics::family;
    using hangar::metrics::sample;
    auto entries = family("hangar_audit_export_entries_total", "counter", "Audit entries delivered per destination");
    auto objects = family("hangar_audit_export_objects_total", "counter", "Objects written per destination");
    auto failures = family("hangar_audit_export_failures_total", "counter", "Failed object writes per destination");
    std::lock_guard lock(stats_mutex_);
    for (const auto &[id, s] : stats_) {
        entries["samples"].push_back(sample({{"destination", id}}, static_cast<double>(s.entries)));
        objects["samples"].push_back(sample({{"destination", id}}, static_cast<double>(s.objects)));
        failures["samples"].push_back(sample({{"destination", id}}, static_cast<double>(s.failures)));
    }
    return {{"families", json::array({entries, objects, failures})}};
}

} // namespace

HANGAR_PLUGIN(AuditExportPlugin, "audit_export", "1.0.0", "org", kMigrations,
              sizeof(kMigrations) / sizeof(kMigrations[0]))
