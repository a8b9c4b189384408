// credentials: Kernel API §3.18 (credentials, [98]-[103]) and §3.23 (credential providers,
// [121]-[127]), and the services managed auth resolves logins through.
//
// Values, TOTP secrets and provider tokens are sealed with hangar::Secrets before they reach the
// store and opened only to compute a TOTP code or to answer credentials.resolve; no route ever
// returns them. Credentials belong to a project, providers to the organisation.
#include "connect.hpp"
#include "model.hpp"

#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>
#include <hangar/secrets.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;

const hangar_migration migrations[] = {
    {1, R"sql(
CREATE TABLE credentials_credentials (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    name TEXT NOT NULL,
    domain TEXT NOT NULL,
    sso_provider TEXT,
    value_keys TEXT NOT NULL DEFAULT '[]',
    values_sealed TEXT,
    totp_sealed TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX credentials_credentials_name ON credentials_credentials (project_id, LOWER(name));
CREATE INDEX credentials_credentials_project ON credentials_credentials (project_id, created_at);
CREATE TABLE credentials_providers (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    name TEXT NOT NULL,
    provider_type TEXT NOT NULL,
    url TEXT NOT NULL,
    token_sealed TEXT NOT NULL,
    cache_ttl_seconds INTEGER NOT NULL,
    enabled INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX credentials_providers_name ON credentials_providers (org_id, LOWER(name));
INSERT INTO secret_columns (owner, table_name, id_column, column_name) VALUES
    ('credentials', 'credentials_credentials', 'id', 'values_sealed'),
    ('credentials', 'credentials_credentials', 'id', 'totp_sealed'),
    ('credentials', 'credentials_providers', 'id', 'token_sealed');
)sql"},
    // 0.131: how codes are made (kernel-api-0131 §2.5); the secret stays sealed in totp_sealed.
    {2, R"sql(
ALTER TABLE credentials_credentials ADD COLUMN totp_algorithm TEXT NOT NULL DEFAULT 'SHA1';
ALTER TABLE credentials_credentials ADD COLUMN totp_digits INTEGER NOT NULL DEFAULT 6;
ALTER TABLE credentials_credentials ADD COLUMN totp_period INTEGER NOT NULL DEFAULT 30;
)sql"},
};

// Providers are the organisation's: a key scoped to one project may not see or change them.
std::string org_of(const Request &req) {
    json caller = req.caller();
    if (caller.value("project_scoped", false))
        throw Error::forbidden("credential providers belong to the organisation: a project-scoped API key cannot "
                               "manage them");
    std::string org = caller.value("org_id", "");
    if (org.empty()) throw Error::unauthorized("no organisation for this caller");
    return org;
}

std::string parse_name(const json &body, const char *what) {
    auto it = body.find("name");
    if (it == body.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string &>().empty()))
        throw Error::invalid("name", "is required");
    if (!it->is_string() || !hangar::valid_resource_name(it->get_ref<const std::string &>()))
        throw Error::invalid("name", std::string("a ") + what +
                                         " name is 1 to 255 characters of letters, digits, '.', '_' and '-'");
    return it->get<std::string>();
}

std::string parse_domain(const json &body) {
    auto it = body.find("domain");
    if (it == body.end() || it->is_null()) throw Error::invalid("domain", "is required");
    if (!it->is_string()) throw Error::invalid("domain", "must be a string");
    if (auto problem = credentials::domain_problem(it->get_ref<const std::string &>()))
        throw Error::invalid("domain", *problem);
    std::string domain = it->get<std::string>();
    std::transform(domain.begin(), domain.end(), domain.begin(), [](unsigned char c) { return std::tolower(c); });
    return domain;
}

// `totp_secret` (base32, 16 to 128 characters, or an otpauth://totp/ URI) and the three
// parameters, as the 0.131 SDK documents them: the parameters need a secret in the same request;
// a raw secret keeps what the credential had (`current`) for the parameters the request leaves
// out, a URI starts from SHA1/6/30; the parameters a URI names win over the fields; "" removes
// the secret and its parameters. The secret is never echoed: only what is wrong with it.
// A TOTP secret as sent (base32 or an otpauth://totp/ URI), or 400 naming what is wrong with it.
credentials::Otp require_otp(const json &value) {
    if (!value.is_string()) throw Error::invalid("totp_secret", "must be a base32 string or an otpauth://totp/ URI");
    std::optional<credentials::Otp> otp;
    try {
        otp = credentials::parse_otp(value.get_ref<const std::string &>());
    } catch (const std::invalid_argument &e) {
        throw Error::invalid("totp_secret", e.what());
    }
    if (!otp) throw Error::invalid("totp_secret", "is not valid base32 (letters A-Z and digits 2-7)");
    return *otp;
}

struct TotpChange {
    std::optional<std::string> secret;             // a new one
    std::optional<credentials::TotpParams> params; // what to store, when it changes
};
TotpChange parse_totp(const json &body, const credentials::TotpParams &current) {
    TotpChange change;
    auto secret = body.find("totp_secret");
    bool has_secret = secret != body.end() && !secret->is_null() && *secret != "";
    if (secret != body.end() && *secret == "") change.params = credentials::TotpParams{};
    std::optional<credentials::Otp> otp;
    if (has_secret) {
        otp = require_otp(*secret);
        if (otp->secret.size() < 16 || otp->secret.size() > 128)
            throw Error::invalid("totp_secret", "must be 16 to 128 base32 characters");
    }
    credentials::TotpParams params = otp && otp->from_uri ? credentials::TotpParams{} : current;
    if (auto it = body.find("totp_algorithm"); it != body.end() && !it->is_null()) {
        if (!it->is_string()) throw Error::invalid("totp_algorithm", "must be SHA1, SHA256 or SHA512");
        params.algorithm = it->get<std::string>();
        std::transform(params.algorithm.begin(), params.algorithm.end(), params.algorithm.begin(),
                       [](unsigned char c) { return std::toupper(c); });
        if (!has_secret) throw Error::invalid("totp_algorithm", "needs totp_secret in the same request");
    }
    for (auto [field, target] : {std::pair{"totp_digits", &params.digits}, std::pair{"totp_period", &params.period}}) {
        auto it = body.find(field);
        if (it == body.end() || it->is_null()) continue;
        if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > 100000)
            throw Error::invalid(field, "must be a whole number");
        if (!has_secret) throw Error::invalid(field, "needs totp_secret in the same request");
        *target = it->get<unsigned>();
    }
    if (!has_secret) return change;
    change.secret = otp->secret;
    change.params = otp->over(params);
    if (auto problem = credentials::totp_params_problem(*change.params)) {
        auto colon = problem->find(':');
        throw Error::invalid(problem->substr(0, colon), problem->substr(colon + 2));
    }
    return change;
}

credentials::TotpParams totp_params_of(const json &row) {
    credentials::TotpParams p;
    if (row.contains("totp_algorithm") && row["totp_algorithm"].is_string()) p.algorithm = row["totp_algorithm"];
    if (row.contains("totp_digits") && row["totp_digits"].is_number()) p.digits = row["totp_digits"].get<unsigned>();
    if (row.contains("totp_period") && row["totp_period"].is_number()) p.period = row["totp_period"].get<unsigned>();
    return p;
}

json parse_values(const json &body, const char *field, bool required) {
    auto it = body.find(field);
    if (it == body.end() || it->is_null()) {
        if (required) throw Error::invalid(field, "is required (an object of field name to value)");
        return json::object();
    }
    if (!it->is_object()) throw Error::invalid(field, "must be an object of field name to string value");
    for (const auto &[key, value] : it->items()) {
        if (key.empty()) throw Error::invalid(field, "field names must not be empty");
        if (!value.is_string()) throw Error::invalid(std::string(field) + "." + key, "must be a string");
    }
    return *it;
}

json key_list(const json &values) {
    json keys = json::array();
    for (const auto &[key, _] : values.items())
        keys.push_back(key);
    return keys;
}

std::optional<std::int64_t> parse_int(const json &body, const char *field, std::int64_t min, std::int64_t max) {
    auto it = body.find(field);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer() &&
        !(it->is_number_float() && it->get<double>() == static_cast<std::int64_t>(it->get<double>())))
        throw Error::invalid(field, "must be an integer");
    auto n = it->is_number_integer() ? it->get<std::int64_t>() : static_cast<std::int64_t>(it->get<double>());
    if (n < min || n > max)
        throw Error::invalid(field, "must be between " + std::to_string(min) + " and " + std::to_string(max));
    return n;
}

std::optional<bool> parse_bool(const json &body, const char *field) {
    auto it = body.find(field);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) throw Error::invalid(field, "must be true or false");
    return it->get<bool>();
}

std::string parse_url(const json &value) {
    if (!value.is_string()) throw Error::invalid("url", "must be the http(s) URL of the 1Password Connect server");
    std::string url = value.get<std::string>();
    auto scheme_end = url.find("://");
    std::string scheme = scheme_end == std::string::npos ? "" : url.substr(0, scheme_end);
    if ((scheme != "http" && scheme != "https") || url.size() <= scheme_end + 3 || credentials::url_host(url).empty())
        throw Error::invalid("url", "must be the http(s) URL of the 1Password Connect server");
    while (url.back() == '/')
        url.pop_back();
    return url;
}

class CredentialsPlugin final : public hangar::Plugin {
public:
    void start() override {
        if (role() != HANGAR_ROLE_SERVER) return; // nothing of it runs inside a browser's sandbox
        secrets_ = std::make_unique<hangar::Secrets>(
            hangar::secrets::key_file(config("secrets.key_file"), config("server.data_dir")));
        timeout_ = std::chrono::milliseconds(config_int("provider_timeout_ms", 10000));
        fetch_policy_ = hangar::egress::Policy::parse(config("server.fetch_allow", ""),
                                                      config_bool("server.fetch_allow_private_networks", false));
        default_url_ = config("onepassword_url", "");
        credentials::ConnectClient::initialize();

        route("POST", "/credentials", [this](Request &q, Response &r) { create(q, r); });
        route("GET", "/credentials", [this](Request &q, Response &r) { list(q, r); });
        route("GET", "/credentials/{id_or_name}",
              [this](Request &q, Response &r) { r.json(render(require(q.project(), q.param("id_or_name")), true)); });
        route("PATCH", "/credentials/{id_or_name}", [this](Request &q, Response &r) { update(q, r); });
        route("DELETE", "/credentials/{id_or_name}", [this](Request &q, Response &r) {
            json row = require(q.project(), q.param("id_or_name"));
            sql("DELETE FROM credentials_credentials WHERE id = ?", json::array({row.at("id")}));
            r.no_content();
        });
        route("GET", "/credentials/{id_or_name}/totp-code", [this](Request &q, Response &r) { totp_code(q, r); });

        route("POST", "/org/credential_providers", [this](Request &q, Response &r) { create_provider(q, r); });
        route("GET", "/org/credential_providers", [this](Request &q, Response &r) { list_providers(q, r); });
        route("GET", "/org/credential_providers/{id}",
              [this](Request &q, Response &r) { r.json(render_provider(require_provider(org_of(q), q.param("id")))); });
        route("PATCH", "/org/credential_providers/{id}", [this](Request &q, Response &r) { update_provider(q, r); });
        route("DELETE", "/org/credential_providers/{id}", [this](Request &q, Response &r) {
            json row = require_provider(org_of(q), q.param("id"));
            sql("DELETE FROM credentials_providers WHERE id = ?", json::array({row.at("id")}));
            forget(row.at("id").get<std::string>());
            r.no_content();
        });
        route("GET", "/org/credential_providers/{id}/items", [this](Request &q, Response &r) {
            json row = require_provider(org_of(q), q.param("id"));
            r.json({{"items", index(row, true)}});
        });
        route("POST", "/org/credential_providers/{id}/test",
              [this](Request &q, Response &r) { r.json(test_provider(require_provider(org_of(q), q.param("id")))); });

        service("credentials.resolve", [this](const json &in) { return resolve(in); });
        service("credentials.merge", [this](const json &in) { return merge(in); });
        // For the vaults plugin's managed-auth items (state.fields): {project_id, name} → the
        // credential as GET /credentials/{id} shows it, `value_keys` only of the values that are
        // not empty; never a value.
        service("credentials.describe", [this](const json &in) {
            json row = require(in.value("project_id", ""), in.value("name", ""));
            json out = render(row, true);
            json keys = json::array();
            const json values = open_values(row); // items() of a temporary would dangle
            for (const auto &[k, v] : values.items())
                if (v.is_string() && !v.get_ref<const std::string &>().empty()) keys.push_back(k);
            out["value_keys"] = keys;
            return out;
        });
        // For the vaults plugin (kernel-api-0131 §1A): a totp field's RFC 4648 base32 seed →
        // {code, expires_at} (SHA1, 6 digits, 30 s, what vault fields are); with "validate_only"
        // only its check. 400 naming `field` (never the seed) when it is not base32.
        service("credentials.totp", [](const json &in) {
            auto canonical = credentials::normalize_base32(in.value("secret", ""));
            if (!canonical) throw Error::invalid(in.value("field", "secret"), "must be an RFC 4648 base32 seed");
            if (in.value("validate_only", false)) return json::object();
            auto code = credentials::totp_now(*canonical, hangar::now_ms());
            return json{{"code", code.code}, {"expires_at", hangar::rfc3339(code.expires_at_ms)}};
        });
    }

    void stop() override {
        if (role() == HANGAR_ROLE_SERVER && secrets_) credentials::ConnectClient::uninitialize();
    }

private:
    // ---- credentials ----

    std::optional<json> find(const std::string &project, const std::string &id_or_name) const {
        return hangar::find_by_id_or_name([this](const std::string &q, const json &p) { return sql(q, p); },
                                          "credentials_credentials", project, id_or_name);
    }

    json require(const std::string &project, const std::string &id_or_name) const {
        if (auto row = find(project, id_or_name)) return *row;
        throw Error::not_found("credential \"" + id_or_name + "\" not found");
    }

    static json render(const json &row, bool single, const std::optional<credentials::TotpCode> &code = std::nullopt) {
        json keys = json::parse(row.value("value_keys", "[]"), nullptr, false);
        if (!keys.is_array()) keys = json::array();
        json out = {{"id", row.at("id")},
                    {"name", row.at("name")},
                    {"domain", row.at("domain")},
                    {"created_at", hangar::rfc3339(row.at("created_at").get<std::int64_t>())},
                    {"updated_at", hangar::rfc3339(row.at("updated_at").get<std::int64_t>())},
                    {"has_values", !keys.empty()},
                    {"has_totp_secret", row.at("totp_sealed").is_string()},
                    {"totp_algorithm", row.value("totp_algorithm", json("SHA1"))},
                    {"totp_digits", row.value("totp_digits", json(6))},
                    {"totp_period", row.value("totp_period", json(30))},
                    {"sso_provider", row.value("sso_provider", json())}};
        if (single) out["value_keys"] = keys;
        if (code) {
            out["totp_code"] = code->code;
            out["totp_code_expires_at"] = hangar::rfc3339(code->expires_at_ms);
        }
        return out;
    }

    void name_must_be_free(const std::string &project, const std::string &name, const std::string &except) const {
        if (!sql("SELECT id FROM credentials_credentials WHERE project_id = ? AND LOWER(name) = LOWER(?) AND id <> ?",
                 {project, name, except})
                 .empty())
            throw Error::conflict("a credential named \"" + name + "\" already exists in this project");
    }

    json sealed_or_null(const json &values) { return values.empty() ? json() : json(secrets_->seal(values.dump())); }

    json open_values(const json &row) {
        if (!row.at("values_sealed").is_string()) return json::object();
        // Never let a parse error quote what it read: that would be a value.
        json values = json::parse(secrets_->open(row.at("values_sealed").get<std::string>()), nullptr, false);
        if (!values.is_object()) throw Error::internal("the stored values of a credential cannot be read");
        return values;
    }

    struct NewCredential {
        std::string name, domain;
        json values = json::object();
        std::optional<std::string> totp_secret, sso_provider;
        credentials::TotpParams totp;
    };

    // Inserts after checking the name (names_mutex_ held); returns the row.
    json insert_locked(const std::string &org, const std::string &project, const NewCredential &c) {
        std::string id = hangar::new_id();
        auto now = hangar::now_ms();
        name_must_be_free(project, c.name, "");
        sql("INSERT INTO credentials_credentials (id, org_id, project_id, name, domain, sso_provider, value_keys, "
            "values_sealed, totp_sealed, totp_algorithm, totp_digits, totp_period, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            {id, org, project, c.name, c.domain, c.sso_provider ? json(*c.sso_provider) : json(),
             key_list(c.values).dump(), sealed_or_null(c.values),
             c.totp_secret ? json(secrets_->seal(*c.totp_secret)) : json(), c.totp.algorithm, c.totp.digits,
             c.totp.period, now, now});
        return require(project, id);
    }

    void create(Request &req, Response &res) {
        std::string project = req.project();
        json body = req.json_body();
        NewCredential c;
        c.name = parse_name(body, "credential");
        c.domain = parse_domain(body);
        c.values = parse_values(body, "values", true);
        auto totp = parse_totp(body, {});
        c.totp_secret = totp.secret;
        c.totp = totp.params.value_or(credentials::TotpParams{});
        if (auto it = body.find("sso_provider"); it != body.end() && !it->is_null()) {
            if (!it->is_string()) throw Error::invalid("sso_provider", "must be a string");
            if (!it->get_ref<const std::string &>().empty()) c.sso_provider = it->get<std::string>();
        }
        json row;
        {
            std::lock_guard lock(names_mutex_);
            row = insert_locked(req.caller().value("org_id", ""), project, c);
        }
        res.json(render(row, true, code_of(row)));
    }

    void list(Request &req, Response &res) {
        std::string project = req.project();
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v);
        v.throw_if_failed("invalid list query");
        std::string where = " WHERE project_id = ?";
        json params = json::array({project});
        if (auto domain = req.query("domain"); domain && !domain->empty()) {
            where += " AND LOWER(domain) = LOWER(?)";
            params.push_back(*domain);
        }
        if (auto q = req.query("query"); q && !q->empty()) {
            where += " AND (INSTR(LOWER(name), LOWER(?)) > 0 OR INSTR(LOWER(domain), LOWER(?)) > 0 OR id = ?)";
            params.insert(params.end(), {*q, *q, *q});
        }
        hangar::answer_page(
            res, [this](const std::string &q, const json &p) { return sql(q, p); },
            "SELECT * FROM credentials_credentials" + where + " ORDER BY created_at DESC, id DESC", params, paging,
            [this](const json &row) { return render(row, false); });
    }

    void update(Request &req, Response &res) {
        std::string project = req.project();
        json body = req.json_body();
        // Everything is validated before anything is written.
        std::optional<std::string> name;
        if (body.contains("name") && !body["name"].is_null()) name = parse_name(body, "credential");
        // Not in Kernel's update, but documented here: a credential moved to another domain.
        std::optional<std::string> domain;
        if (body.contains("domain") && !body["domain"].is_null()) domain = parse_domain(body);
        std::vector<std::string> remove_keys;
        if (auto it = body.find("remove_value_keys"); it != body.end() && !it->is_null()) {
            if (!it->is_array()) throw Error::invalid("remove_value_keys", "must be an array of field names");
            for (const auto &k : *it) {
                if (!k.is_string()) throw Error::invalid("remove_value_keys", "must be an array of field names");
                remove_keys.push_back(k.get<std::string>());
            }
        }
        json values = parse_values(body, "values", false);
        std::optional<json> sso; // null = remove
        if (auto it = body.find("sso_provider"); it != body.end()) {
            if (!it->is_null() && !it->is_string()) throw Error::invalid("sso_provider", "must be a string or null");
            sso = it->is_null() || it->get_ref<const std::string &>().empty() ? json() : *it;
        }
        bool remove_totp = body.contains("totp_secret") && body["totp_secret"] == "";

        std::lock_guard lock(names_mutex_);
        json row = require(project, req.param("id_or_name"));
        // Checked against what the credential has: a new period alone must still fit its digits.
        auto totp = parse_totp(body, totp_params_of(row));
        std::string id = row.at("id").get<std::string>();
        if (name) name_must_be_free(project, *name, id);
        std::string set = "updated_at = ?";
        json params = json::array({hangar::now_ms()});
        if (name) {
            set += ", name = ?";
            params.push_back(*name);
        }
        if (domain) {
            set += ", domain = ?";
            params.push_back(*domain);
        }
        if (!remove_keys.empty() || !values.empty()) {
            json merged = open_values(row);
            for (const auto &k : remove_keys)
                merged.erase(k);
            for (const auto &[k, v] : values.items())
                merged[k] = v;
            set += ", value_keys = ?, values_sealed = ?";
            params.push_back(key_list(merged).dump());
            params.push_back(sealed_or_null(merged));
        }
        if (sso) {
            set += ", sso_provider = ?";
            params.push_back(*sso);
        }
        if (totp.secret || remove_totp) {
            set += ", totp_sealed = ?";
            params.push_back(totp.secret ? json(secrets_->seal(*totp.secret)) : json());
        }
        if (totp.params) {
            set += ", totp_algorithm = ?, totp_digits = ?, totp_period = ?";
            params.insert(params.end(), {totp.params->algorithm, totp.params->digits, totp.params->period});
        }
        params.push_back(id);
        sql("UPDATE credentials_credentials SET " + set + " WHERE id = ?", params);
        json updated = require(project, id);
        res.json(render(updated, true, totp.secret ? code_of(updated) : std::nullopt));
    }

    std::optional<credentials::TotpCode> code_of(const json &row) {
        if (!row.at("totp_sealed").is_string()) return std::nullopt;
        return credentials::totp_now(secrets_->open(row.at("totp_sealed").get<std::string>()), hangar::now_ms(),
                                     totp_params_of(row));
    }

    void totp_code(Request &req, Response &res) {
        json row = require(req.project(), req.param("id_or_name"));
        auto code = code_of(row);
        if (!code)
            throw Error::bad_request("credential \"" + row.at("name").get<std::string>() +
                                     "\" has no TOTP secret: set totp_secret first");
        res.json({{"code", code->code}, {"expires_at", hangar::rfc3339(code->expires_at_ms)}});
    }

    // ---- credential providers ----

    std::optional<json> find_provider(const std::string &org, const std::string &id_or_name) const {
        return hangar::find_by_id_or_name([this](const std::string &q, const json &p) { return sql(q, p); },
                                          "credentials_providers", org, id_or_name, "org_id");
    }

    json require_provider(const std::string &org, const std::string &id_or_name) const {
        if (auto row = find_provider(org, id_or_name)) return *row;
        throw Error::not_found("credential provider \"" + id_or_name + "\" not found");
    }

    static json render_provider(const json &row) {
        return {{"id", row.at("id")},
                {"name", row.at("name")},
                {"provider_type", row.at("provider_type")},
                {"enabled", row.at("enabled").get<int>() != 0},
                {"priority", row.at("priority")},
                {"cache_ttl_seconds", row.at("cache_ttl_seconds")},
                {"url", row.at("url")},
                {"created_at", hangar::rfc3339(row.at("created_at").get<std::int64_t>())},
                {"updated_at", hangar::rfc3339(row.at("updated_at").get<std::int64_t>())}};
    }

    void provider_name_must_be_free(const std::string &org, const std::string &name, const std::string &except) const {
        if (!sql("SELECT id FROM credentials_providers WHERE org_id = ? AND LOWER(name) = LOWER(?) AND id <> ?",
                 {org, name, except})
                 .empty())
            throw Error::conflict("a credential provider named \"" + name + "\" already exists");
    }

    static std::string parse_token(const json &value) {
        if (!value.is_string() || value.get_ref<const std::string &>().empty())
            throw Error::invalid("token", "must be the 1Password Connect access token");
        return value.get<std::string>();
    }

    void create_provider(Request &req, Response &res) {
        std::string org = org_of(req);
        json body = req.json_body();
        std::string name = parse_name(body, "credential provider");
        auto type = body.find("provider_type");
        if (type == body.end() || type->is_null()) throw Error::invalid("provider_type", "is required (onepassword)");
        if (*type != "onepassword") throw Error::invalid("provider_type", "must be onepassword");
        if (!body.contains("token")) throw Error::invalid("token", "is required");
        std::string token = parse_token(body["token"]);
        std::string url;
        if (body.contains("url") && !body["url"].is_null())
            url = parse_url(body["url"]);
        else if (!default_url_.empty())
            url = parse_url(default_url_);
        else
            throw Error::invalid("url", "is required: the URL of the 1Password Connect server (a Hangar addition)");
        auto ttl = parse_int(body, "cache_ttl_seconds", 0, 86400).value_or(300);
        auto priority = parse_int(body, "priority", -1000000, 1000000).value_or(0);
        bool enabled = parse_bool(body, "enabled").value_or(true);
        std::string id = hangar::new_id();
        auto now = hangar::now_ms();
        std::lock_guard lock(names_mutex_);
        provider_name_must_be_free(org, name, "");
        sql("INSERT INTO credentials_providers (id, org_id, name, provider_type, url, token_sealed, cache_ttl_seconds, "
            "enabled, priority, created_at, updated_at) VALUES (?, ?, ?, 'onepassword', ?, ?, ?, ?, ?, ?, ?)",
            {id, org, name, url, secrets_->seal(token), ttl, enabled ? 1 : 0, priority, now, now});
        res.json(render_provider(require_provider(org, id)));
    }

    void list_providers(Request &req, Response &res) {
        std::string org = org_of(req);
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v);
        v.throw_if_failed("invalid list query");
        std::string where = " WHERE org_id = ?";
        json params = json::array({org});
        if (auto q = req.query("query"); q && !q->empty()) {
            where += " AND (INSTR(LOWER(name), LOWER(?)) > 0 OR id = ?)";
            params.insert(params.end(), {*q, *q});
        }
        hangar::answer_page(
            res, [this](const std::string &q, const json &p) { return sql(q, p); },
            "SELECT * FROM credentials_providers" + where + " ORDER BY priority, created_at, id", params, paging,
            [this](const json &row) { return render_provider(row); });
    }

    void update_provider(Request &req, Response &res) {
        std::string org = org_of(req);
        json body = req.json_body();
        std::string set = "updated_at = ?";
        json params = json::array({hangar::now_ms()});
        std::optional<std::string> name;
        if (body.contains("name") && !body["name"].is_null()) name = parse_name(body, "credential provider");
        if (body.contains("token") && !body["token"].is_null()) {
            set += ", token_sealed = ?";
            params.push_back(secrets_->seal(parse_token(body["token"])));
        }
        if (body.contains("url") && !body["url"].is_null()) {
            set += ", url = ?";
            params.push_back(parse_url(body["url"]));
        }
        if (auto ttl = parse_int(body, "cache_ttl_seconds", 0, 86400)) {
            set += ", cache_ttl_seconds = ?";
            params.push_back(*ttl);
        }
        if (auto enabled = parse_bool(body, "enabled")) {
            set += ", enabled = ?";
            params.push_back(*enabled ? 1 : 0);
        }
        if (auto priority = parse_int(body, "priority", -1000000, 1000000)) {
            set += ", priority = ?";
            params.push_back(*priority);
        }
        std::lock_guard lock(names_mutex_);
        json row = require_provider(org, req.param("id"));
        std::string id = row.at("id").get<std::string>();
        if (name) {
            provider_name_must_be_free(org, *name, id);
            set += ", name = ?";
            params.push_back(*name);
        }
        params.push_back(id);
        sql("UPDATE credentials_providers SET " + set + " WHERE id = ?", params);
        forget(id);
        res.json(render_provider(require_provider(org, id)));
    }

    credentials::ConnectClient client_of(const json &row) {
        return {row.at("url").get<std::string>(), secrets_->open(row.at("token_sealed").get<std::string>()), timeout_,
                fetch_policy_};
    }

    json test_provider(const json &row) {
        json vaults = json::array();
        try {
            for (const auto &v : client_of(row).vaults())
                vaults.push_back({{"id", v.value("id", "")}, {"name", v.value("name", "")}});
        } catch (const credentials::ConnectError &e) {
            return {{"success", false}, {"vaults", json::array()}, {"error", e.what()}};
        }
        return {{"success", true}, {"vaults", vaults}};
    }

    // What a provider's Connect server holds, kept for cache_ttl_seconds: the login items (as
    // CredentialProviderItem) and each full item fetched for resolution (values included).
    struct Cached {
        std::int64_t updated_at = 0; // the provider row's: a PATCH (new token, url) starts afresh
        std::int64_t index_expires_ms = 0;
        json index;
        std::map<std::string, std::pair<std::int64_t, json>> items; // item id → (expires, FullItem)
    };

    void forget(const std::string &provider_id) {
        std::lock_guard lock(cache_mutex_);
        cache_.erase(provider_id);
    }

    // Cached entry for the row, dropped when the row changed since.
    Cached &cached_locked(const json &row) {
        auto &c = cache_[row.at("id").get<std::string>()];
        if (c.updated_at != row.at("updated_at").get<std::int64_t>())
            c = Cached{row.at("updated_at").get<std::int64_t>(), 0, {}, {}};
        return c;
    }

    static std::int64_t ttl_ms(const json &row) { return row.at("cache_ttl_seconds").get<std::int64_t>() * 1000; }

    [[noreturn]] static void upstream(const credentials::ConnectError &e) {
        if (e.refused())
            throw Error::bad_request(std::string("credential provider: ") + e.what(),
                                     {{"invalid_input", std::string("url: ") + e.what()}});
        throw Error(502, "upstream_unavailable", std::string("credential provider: ") + e.what());
    }

    // Whether one of a provider item's URLs is for `domain`.
    static bool item_for(const json &item, const std::string &domain) {
        for (const auto &url : item.at("urls"))
            if (credentials::host_matches(credentials::url_host(url.get<std::string>()), domain)) return true;
        return false;
    }

    // Login items of every vault the token reaches.
    json index(const json &row, bool fresh) {
        auto now = hangar::now_ms();
        if (!fresh) {
            std::lock_guard lock(cache_mutex_);
            auto &c = cached_locked(row);
            if (c.index_expires_ms > now) return c.index;
        }
        json items = json::array();
        try {
            auto client = client_of(row);
            for (const auto &vault : client.vaults()) {
                std::string vault_id = vault.value("id", ""), vault_name = vault.value("name", "");
                for (const auto &item : client.items(vault_id)) {
                    if (item.value("category", "") != "LOGIN" || item.value("trashed", false)) continue;
                    json urls = json::array();
                    if (auto u = item.find("urls"); u != item.end() && u->is_array())
                        for (const auto &url : *u)
                            if (url.contains("href") && url["href"].is_string()) urls.push_back(url["href"]);
                    std::string title = item.value("title", ""), path = vault_name;
                    path.append("/").append(title);
                    items.push_back({{"id", item.value("id", "")},
                                     {"title", title},
                                     {"path", path},
                                     {"vault_id", vault_id},
                                     {"vault_name", vault_name},
                                     {"urls", urls}});
                }
            }
        } catch (const credentials::ConnectError &e) {
            upstream(e);
        }
        std::lock_guard lock(cache_mutex_);
        auto &c = cached_locked(row);
        c.index = items;
        c.index_expires_ms = now + ttl_ms(row);
        return items;
    }

    json full_item(const json &row, const json &entry) {
        auto now = hangar::now_ms();
        std::string item_id = entry.at("id");
        {
            std::lock_guard lock(cache_mutex_);
            auto &c = cached_locked(row);
            if (auto it = c.items.find(item_id); it != c.items.end() && it->second.first > now)
                return it->second.second;
        }
        json item;
        try {
            item = client_of(row).item(entry.at("vault_id"), item_id);
        } catch (const credentials::ConnectError &e) {
            upstream(e);
        }
        std::lock_guard lock(cache_mutex_);
        if (ttl_ms(row) > 0) cached_locked(row).items[item_id] = {now + ttl_ms(row), item};
        return item;
    }

    // ---- services ----

    // A credential reference → values and a fresh TOTP code.
    //   {project_id, org_id, credential: {name} | {provider, path} | {provider?, auto: true, domain?}, domain?,
    //    check_only?}
    // `domain` is the site the values are for (managed auth: the connection's): an org provider's
    // item must be for it, or a project could have the org's login for one site typed into a
    // page of its own choosing. `check_only`: the item found and matched, no values fetched.
    json resolve(const json &in) {
        std::string project = in.value("project_id", ""), org = in.value("org_id", "");
        std::string site = in.value("domain", "");
        json ref = in.value("credential", json::object());
        if (!ref.is_object()) throw Error::invalid("credential", "must be an object");
        auto now = hangar::now_ms();
        auto with_code = [&](json out, const std::optional<std::string> &secret,
                             const credentials::TotpParams &params) {
            if (secret) {
                auto code = credentials::totp_now(*secret, now, params);
                out["totp_code"] = code.code;
                out["totp_code_expires_at"] = hangar::rfc3339(code.expires_at_ms);
            }
            return out;
        };
        if (ref.contains("name")) {
            if (project.empty()) throw Error::invalid("project_id", "is required");
            json row = require(project, ref.value("name", ""));
            std::optional<std::string> secret;
            if (row.at("totp_sealed").is_string()) secret = secrets_->open(row.at("totp_sealed").get<std::string>());
            return with_code({{"source", "credential"},
                              {"credential", render(row, true)},
                              {"values", open_values(row)},
                              {"sso_provider", row.value("sso_provider", json())}},
                             secret, totp_params_of(row));
        }
        if (org.empty()) throw Error::invalid("org_id", "is required for provider references");
        std::vector<json> providers;
        if (ref.contains("provider")) {
            json p = require_provider(org, ref.value("provider", ""));
            if (p.at("enabled").get<int>() == 0)
                throw Error::conflict("credential provider \"" + p.at("name").get<std::string>() + "\" is disabled");
            providers.push_back(p);
        } else if (ref.value("auto", false)) {
            for (auto &p : sql("SELECT * FROM credentials_providers WHERE org_id = ? AND enabled = 1 "
                               "ORDER BY priority, created_at, id",
                               {org}))
                providers.push_back(p);
        } else {
            throw Error::invalid("credential", "must name a credential ({name}) or a provider ({provider, path} or "
                                               "{provider, auto: true})");
        }
        std::optional<json> match;
        json provider;
        if (ref.value("auto", false)) {
            std::string domain = site.empty() ? ref.value("domain", "") : site;
            if (domain.empty()) throw Error::invalid("domain", "is required to match provider items automatically");
            // A provider whose server fails is skipped: the next one may still hold the login.
            std::vector<std::string> failures;
            for (const auto &p : providers) {
                json listed;
                try {
                    listed = index(p, false);
                } catch (const Error &e) {
                    failures.push_back(e.what());
                    continue;
                }
                for (const auto &item : listed)
                    if (item_for(item, domain)) {
                        match = item;
                        break;
                    }
                if (match) {
                    provider = p;
                    break;
                }
            }
            if (!match && !failures.empty())
                throw Error(502, "upstream_unavailable",
                            "no reachable credential provider has a login for " + domain + " (" + failures.front() +
                                ")");
            if (!match) throw Error::not_found("no login item of a credential provider matches " + domain);
        } else {
            std::string path = ref.value("path", "");
            if (path.find('/') == std::string::npos) throw Error::invalid("path", "must be \"Vault/Item\"");
            provider = providers.front();
            for (const auto &item : index(provider, false))
                if (item.at("path") == path ||
                    item.at("vault_id").get<std::string>() + "/" + item.at("id").get<std::string>() == path) {
                    match = item;
                    break;
                }
            if (!match) throw Error::not_found("no login item \"" + path + "\" in the credential provider");
            if (!site.empty() && !item_for(*match, site))
                throw Error::bad_request("login item \"" + path + "\" is not for " + site +
                                             " (its URLs: " + match->at("urls").dump() + ")",
                                         {{"invalid_input", "credential.path: the item is not for " + site}});
        }
        if (in.value("check_only", false)) return {{"item", *match}};
        auto login = credentials::login_from_item(full_item(provider, *match));
        return with_code({{"source", "provider"},
                          {"provider", {{"id", provider.at("id")}, {"name", provider.at("name")}}},
                          {"item", *match},
                          {"values", login.values}},
                         login.totp ? std::optional(login.totp->secret) : std::nullopt,
                         login.totp ? login.totp->over({}) : credentials::TotpParams{});
    }

    // Learned values merged into a credential, which is created when absent.
    //   {project_id, org_id, name, domain (to create), values, totp_secret?} → {credential, created}
    json merge(const json &in) {
        std::string project = in.value("project_id", "");
        if (project.empty()) throw Error::invalid("project_id", "is required");
        std::string name = parse_name(in, "credential");
        json values = parse_values(in, "values", false);
        // A secret a login flow learned: the site's, whatever its length.
        std::optional<credentials::Otp> totp;
        if (auto it = in.find("totp_secret"); it != in.end() && !it->is_null() && *it != "") totp = require_otp(*it);
        std::lock_guard lock(names_mutex_);
        if (auto row = find(project, name)) {
            json merged = open_values(*row);
            for (const auto &[k, v] : values.items())
                merged[k] = v;
            auto params = totp ? totp->over(totp_params_of(*row)) : totp_params_of(*row);
            sql("UPDATE credentials_credentials SET value_keys = ?, values_sealed = ?, totp_sealed = COALESCE(?, "
                "totp_sealed), totp_algorithm = ?, totp_digits = ?, totp_period = ?, updated_at = ? WHERE id = ?",
                {key_list(merged).dump(), sealed_or_null(merged), totp ? json(secrets_->seal(totp->secret)) : json(),
                 params.algorithm, params.digits, params.period, hangar::now_ms(), row->at("id")});
            return {{"credential", render(require(project, row->at("id")), true)}, {"created", false}};
        }
        NewCredential c;
        c.name = name;
        c.domain = parse_domain(in);
        c.values = values;
        if (totp) {
            c.totp_secret = totp->secret;
            c.totp = totp->over({});
        }
        return {{"credential", render(insert_locked(in.value("org_id", ""), project, c), true)}, {"created", true}};
    }

    std::unique_ptr<hangar::Secrets> secrets_;
    std::chrono::milliseconds timeout_{10000};
    hangar::egress::Policy fetch_policy_; // [server] fetch_allow*: which Connect URLs the server dials
    std::string default_url_;
    std::mutex names_mutex_;
    std::mutex cache_mutex_;
    std::map<std::string, Cached> cache_; // provider id → what its server held
};

} // namespace

HANGAR_PLUGIN(CredentialsPlugin, "credentials", "0.1.0", nullptr, migrations,
              sizeof(migrations) / sizeof(migrations[0]))
