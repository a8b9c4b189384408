// The playwright plugin: code agents run next to their browser — playwright/execute with its
// named executors, the persistent REPL, and WebMCP (kernel-api.md §3.12, kernel-api-0131.md
// §1G–1I, §2.9).
//
// The server half relays each call to the browser's instance. There, inside the sandbox, the
// instance half hands it to a Node.js runtime (executor/): one process per executor, one for the
// REPL, one WebMCP service, each spoken to in JSON lines (node_child.hpp). See README.md for why
// it is built so.
#include "node_child.hpp"
#include "runtime_model.hpp"

#include <hangar/cdp.hpp>
#include <hangar/plugin.hpp>
#include <hangar/process.hpp>
#include <hangar/resource.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
using playwright::NodeChild;
namespace proc = hangar::proc;
using namespace std::chrono_literals;

// How much longer than a call's own timeout the agent waits for the executor (which enforces
// that timeout itself) before it declares the executor wedged and replaces it.
constexpr auto kExecutorGrace = 15s;
// How long the WebMCP service may take beyond an invocation's timeout to answer that it timed out.
constexpr auto kWebmcpGrace = 5s;

// 60 → "60", 1.5 → "1.5", as the executor's own timeout message prints them.
std::string seconds(double value) {
    std::ostringstream out;
    out << value;
    return out.str();
}

std::chrono::milliseconds millis(double seconds) {
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000)));
}

std::string now_rfc3339() {
    return hangar::rfc3339(hangar::now_ms());
}

// A path segment the agent's own routes can take as it is (executor names, custom tool ids);
// anything else is no such resource.
bool plain_segment(const std::string &s) {
    return !s.empty() && s.size() <= 128 &&
           s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
               std::string::npos &&
           s != "." && s != "..";
}

// One executor of this browser: its process (started on demand) and what GET …/executors says.
struct Executor {
    std::string name;
    std::string created_at = now_rfc3339();
    std::string last_used_at = created_at;
    std::string target_id;
    bool busy = false;
    std::shared_ptr<NodeChild> child;
    std::mutex run_mu; // calls on one executor run one after another, in arrival order
};

class PlaywrightPlugin : public hangar::Plugin {
public:
    void start_instance() override {
        // A missing runtime must not stop the instance (every other area still works): it is
        // logged now and named in each call's answer.
        try {
            node_ = proc::find_program(config("node", "node"));
            dir_ = executor_dir();
            if (!std::filesystem::exists(dir_ + "/node_modules/playwright-core"))
                throw std::runtime_error(dir_ + " has no node_modules (run `make setup`, or set executor_dir)");
        } catch (const std::exception &e) {
            unavailable_ = std::string("the Playwright runtime is not available: ") + e.what();
            warn(unavailable_);
        }
        // The agent's own /cdp route always dials the current Chromium, so a runtime's cached
        // connection survives Chromium restarts by reconnecting to the same address.
        endpoint_ = "ws+unix:" + instance_agent_socket() + ":/cdp";
        executors_.emplace(playwright::kDefaultExecutor, std::make_shared<Executor>());
        executors_[playwright::kDefaultExecutor]->name = playwright::kDefaultExecutor;
        route("POST", "/playwright/execute", [this](Request &q, Response &r) { execute(q, r); });
        route("GET", "/playwright/executors", [this](Request &q, Response &r) { list_executors(q, r); });
        route("DELETE", "/playwright/executors/{name}", [this](Request &q, Response &r) { delete_executor(q, r); });
        route("POST", "/repl", [this](Request &q, Response &r) { repl(q, r); });
        route("GET", "/webmcp/tools", [this](Request &q, Response &r) {
            auto exclude = q.query("exclude_custom");
            webmcp(r, {{"op", "list"}, {"exclude_custom", exclude == "true" || exclude == "1"}}, 30s);
        });
        route("POST", "/webmcp/invoke", [this](Request &q, Response &r) {
            auto call = playwright::invoke_call(q.json_body());
            webmcp(r,
                   {{"op", "invoke"},
                    {"tool_ref", call.tool_ref},
                    {"input", call.input},
                    {"timeout_ms", millis(call.timeout_sec).count()}},
                   millis(call.timeout_sec) + kWebmcpGrace);
        });
        route("GET", "/webmcp/custom-tools", [this](Request &, Response &r) {
            webmcp(r, {{"op", "custom_list"}}, 30s);
        });
        route("POST", "/webmcp/custom-tools", [this](Request &q, Response &r) {
            json body = q.json_body();
            playwright::check_custom_tools_body(body);
            webmcp(r,
                   {{"op", "custom_add"},
                    {"namespace", body["namespace"]},
                    {"source", body["source"]},
                    {"force_overwrite_namespace", body.value("force_overwrite_namespace", json()) == json(true)}},
                   60s);
        });
        route("DELETE", "/webmcp/custom-tools/{tool}", [this](Request &q, Response &r) {
            webmcp(r, {{"op", "custom_delete"}, {"tool_id", q.param("tool")}}, 30s);
        });
        // Node and playwright-core take about a second to load; prestarting moves that out of the
        // first call at the price of a Node process in every browser, used or not.
        if (unavailable_.empty() && config_bool("prestart", false)) {
            auto &d = *executors_[playwright::kDefaultExecutor];
            std::lock_guard lock(d.run_mu);
            child_of(d);
        }
    }

    void stop_instance() override {
        std::map<std::string, std::shared_ptr<Executor>> executors;
        std::shared_ptr<NodeChild> repl, webmcp;
        {
            std::lock_guard lock(mu_);
            executors.swap(executors_);
            repl = std::move(repl_);
            webmcp = std::move(webmcp_);
        }
        for (auto &[name, e] : executors)
            if (auto child = std::move(e->child)) child->terminate("the browser is shutting down");
    }

    // The server half: every route is the browser's own; the session decides 404.
    void start_server() override {
        auto relay = [this](const char *method, const char *path, auto agent_path) {
            route(method, path, [this, agent_path](Request &q, Response &r) { relay_to_session(q, r, agent_path(q)); });
        };
        auto fixed = [](const std::string &p) { return [p](Request &) { return p; }; };
        relay("POST", "/browsers/{id}/playwright/execute", fixed("/playwright/execute"));
        relay("GET", "/browsers/{id}/playwright/executors", fixed("/playwright/executors"));
        relay("DELETE", "/browsers/{id}/playwright/executors/{name}", [](Request &q) {
            if (!plain_segment(q.param("name")))
                throw Error::not_found("no Playwright executor named " + q.param("name"));
            return "/playwright/executors/" + q.param("name");
        });
        relay("POST", "/browsers/{id}/repl", fixed("/repl"));
        relay("GET", "/browsers/{id}/webmcp/tools", fixed("/webmcp/tools"));
        relay("POST", "/browsers/{id}/webmcp/invoke", fixed("/webmcp/invoke"));
        relay("GET", "/browsers/{id}/webmcp/custom-tools", fixed("/webmcp/custom-tools"));
        relay("POST", "/browsers/{id}/webmcp/custom-tools", fixed("/webmcp/custom-tools"));
        relay("DELETE", "/browsers/{id}/webmcp/custom-tools/{tool}", [](Request &q) {
            if (!plain_segment(q.param("tool"))) throw Error::not_found("no custom tool " + q.param("tool"));
            return "/webmcp/custom-tools/" + q.param("tool");
        });
    }

private:
    // ---- instance half ----

    std::string executor_dir() const {
        return proc::runtime_dir(config("executor_dir", ""), "playwright-executor", "executor.mjs",
                                 HANGAR_PLAYWRIGHT_EXECUTOR_SOURCE_DIR);
    }

    NodeChild::Spec spec(const std::string &script, std::vector<std::string> extra_args,
                         std::function<json(const std::string &)> on_exit) const {
        NodeChild::Spec s;
        s.node = node_;
        // The REPL loads modules through vm's main-context loader, still flagged experimental.
        s.args = {"--disable-warning=ExperimentalWarning", dir_ + "/" + script, endpoint_};
        s.args.insert(s.args.end(), extra_args.begin(), extra_args.end());
        s.env = {"NODE_PATH=" + dir_ + "/node_modules", "HANGAR_AGENT_SOCKET=" + instance_agent_socket()};
        s.on_exit = std::move(on_exit);
        return s;
    }

    // Called with the executor's run_mu held (or from start()), so one process at a time is started.
    std::shared_ptr<NodeChild> child_of(Executor &e) {
        std::lock_guard lock(mu_); // a delete takes the child away under it
        if (!e.child || !e.child->alive()) {
            if (e.child) warn("the Playwright executor '" + e.name + "' exited; starting a new one");
            std::vector<std::string> args;
            if (e.name != playwright::kDefaultExecutor) args = {"--executor", e.name};
            // Most likely the snippet ended it, so this is the snippet's failure (200,
            // success:false); a 5xx would make the SDK retry, running the user's code again.
            auto s = spec("executor.mjs", args, [](const std::string &why) {
                return json{{"success", false}, {"error", why}, {"stdout", ""}, {"stderr", ""}};
            });
            s.exited = "the Playwright executor exited during the call";
            e.child = std::make_shared<NodeChild>(std::move(s));
        }
        return e.child;
    }

    void require_runtime() const {
        if (!unavailable_.empty()) throw Error::internal(unavailable_);
    }

    void execute(Request &req, Response &res) {
        auto call = playwright::execute_call(req.json_body());
        const auto &name = call.executor;
        double timeout = call.timeout_sec;
        require_runtime();

        std::shared_ptr<Executor> e;
        {
            std::lock_guard lock(mu_);
            std::vector<std::string> named;
            for (const auto &[n, x] : executors_)
                if (n != playwright::kDefaultExecutor) named.push_back(n);
            playwright::check_executor_cap(named, name);
            auto &slot = executors_[name];
            if (!slot) {
                slot = std::make_shared<Executor>();
                slot->name = name;
            }
            e = slot;
        }
        json answer;
        {
            std::lock_guard one_at_a_time(e->run_mu);
            auto child = child_of(*e);
            mark_started(*e);
            auto future = child->submit({{"code", call.code}, {"timeout_ms", millis(timeout).count()}});
            if (future.wait_for(millis(timeout) + kExecutorGrace) != std::future_status::ready) {
                child->terminate("the Playwright executor did not answer in time");
                warn("the Playwright executor '" + name + "' did not answer in time; replacing it");
                answer = {{"success", false}, {"error", "execution timed out after " + seconds(timeout) + " seconds"}};
            } else {
                answer = future.get();
            }
            std::lock_guard lock(mu_);
            e->busy = false;
            // The default executor owns no tab: it works on whichever is first.
            if (name != playwright::kDefaultExecutor && answer.contains("tab") && answer["tab"].is_object())
                e->target_id = answer["tab"].value("target_id", "");
        }
        res.json(answer);
    }

    // A call starts on `e`: what GET …/executors shows while it runs.
    void mark_started(Executor &e) {
        std::lock_guard lock(mu_);
        e.busy = true;
        e.last_used_at = now_rfc3339();
    }

    // A DevTools HTTP request (/json/list, /json/close/<id>) to this instance's Chromium; nothing
    // while none runs (between restarts).
    std::optional<std::string> devtools_get(const std::string &path) const {
        auto endpoint = hangar::cdp::endpoint_of(call("browsers.chromium", json::object()));
        if (!endpoint) return std::nullopt;
        return hangar::cdp::http_get(endpoint->port, path, 2000ms);
    }

    // The URL of each open page target, by id, from Chromium's /json/list.
    std::map<std::string, std::string> tab_urls() const {
        std::map<std::string, std::string> urls;
        try {
            auto body = devtools_get("/json/list");
            if (!body) return urls;
            auto list = json::parse(*body, nullptr, false);
            for (const auto &t : list.is_array() ? list : json::array())
                if (t.value("type", "") == "page") urls[t.value("id", "")] = t.value("url", "");
        } catch (const std::exception &) {
            // Chromium is restarting: the executors are listed without their tabs' URLs.
        }
        return urls;
    }

    void list_executors(Request &, Response &res) {
        auto urls = tab_urls();
        json out = json::array();
        std::lock_guard lock(mu_);
        std::vector<std::shared_ptr<Executor>> order;
        for (const auto &[n, e] : executors_)
            order.push_back(e);
        // The default first, then the named ones as they were created.
        std::stable_sort(order.begin(), order.end(), [](const auto &a, const auto &b) {
            if ((a->name == playwright::kDefaultExecutor) != (b->name == playwright::kDefaultExecutor))
                return a->name == playwright::kDefaultExecutor;
            return a->created_at < b->created_at;
        });
        for (const auto &e : order) {
            json x = {
                {"name", e->name}, {"busy", e->busy}, {"created_at", e->created_at}, {"last_used_at", e->last_used_at}};
            if (auto it = urls.find(e->target_id); !e->target_id.empty() && it != urls.end()) {
                x["target_id"] = e->target_id;
                x["url"] = it->second;
            }
            out.push_back(std::move(x));
        }
        res.json({{"executors", out}});
    }

    void delete_executor(Request &req, Response &res) {
        auto name = req.param("name");
        auto close = req.query("close_tab");
        bool close_tab = !(close == "false" || close == "0");
        std::shared_ptr<Executor> e;
        std::shared_ptr<NodeChild> child;
        {
            std::lock_guard lock(mu_);
            auto it = executors_.find(name);
            if (it == executors_.end())
                throw Error::not_found("no Playwright executor named " + name + " on this browser");
            e = it->second;
            // The default always exists: deleting it restarts it, the next call starting a new process.
            if (name != playwright::kDefaultExecutor) executors_.erase(it);
            child = std::move(e->child);
        }
        if (child) child->terminate("executor was deleted");
        if (name != playwright::kDefaultExecutor && close_tab && !e->target_id.empty()) {
            try {
                devtools_get("/json/close/" + e->target_id);
            } catch (const std::exception &ex) {
                warn(std::string("closing the deleted executor's tab failed: ") + ex.what());
            }
        }
        res.status(204);
    }

    void repl(Request &req, Response &res) {
        auto call = playwright::repl_call(req.json_body());
        require_runtime();
        std::lock_guard one_at_a_time(repl_mu_);
        // The REPL in use is taken under mu_ (stop_instance takes it away there) and used through
        // this copy; an old one is ended outside the lock, its destructor reaping it.
        std::shared_ptr<NodeChild> child, old;
        std::string repl_id;
        {
            std::lock_guard lock(mu_);
            if (call.reset || (repl_ && !repl_->alive())) old = std::move(repl_);
            if (!repl_) {
                repl_id_ = hangar::new_id();
                auto s = spec("repl.mjs", {}, [](const std::string &why) {
                    return json{{"success", false}, {"error", why}, {"repl_terminated", true}};
                });
                s.exited = "the REPL's process exited during the call (process.exit, a crash or out of memory)";
                repl_ = std::make_shared<NodeChild>(std::move(s));
            }
            child = repl_;
            repl_id = repl_id_;
        }
        if (old) old->terminate("the REPL was reset");
        old.reset();
        json answer;
        if (call.code.empty()) {
            answer = {{"success", true}, {"content", json::array()}, {"duration_ms", 0}};
        } else {
            auto started = std::chrono::steady_clock::now();
            auto future = child->submit({{"code", call.code}});
            // The REPL cannot stop a busy loop from inside: a timeout ends its process, and with
            // it the REPL's state, which the answer says.
            if (future.wait_for(millis(call.timeout_sec)) != std::future_status::ready) {
                child->terminate("execution timed out after " + seconds(call.timeout_sec) + " seconds");
                answer = future.get();
                answer["duration_ms"] =
                    std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started)
                        .count();
            } else {
                answer = future.get();
            }
            if (answer.value("repl_terminated", false)) {
                std::lock_guard lock(mu_);
                if (repl_ == child) old = std::move(repl_);
            }
        }
        answer["repl_id"] = repl_id;
        res.json(answer);
    }

    // One call to the WebMCP service, started on the first; its answer carries the HTTP status.
    void webmcp(Response &res, json call, std::chrono::milliseconds wait) {
        require_runtime();
        std::shared_ptr<NodeChild> service;
        {
            std::lock_guard lock(mu_);
            if (!webmcp_ || !webmcp_->alive()) {
                if (webmcp_) warn("the WebMCP service exited; starting a new one");
                auto s = spec("webmcp.mjs", {}, [](const std::string &why) {
                    return json{{"status", 502},
                                {"body", {{"code", "upstream_unavailable"}, {"message", "the WebMCP service " + why}}}};
                });
                // The custom tools outlive a restart of the service: it keeps them in the instance's
                // own run folder (never a shared /tmp, for agents run without bubblewrap).
                s.env.push_back("HANGAR_WEBMCP_STATE=" + instance_run_dir() + "/webmcp-custom-tools.json");
                webmcp_ = std::make_shared<NodeChild>(std::move(s));
            }
            service = webmcp_;
        }
        auto future = service->submit(std::move(call));
        if (future.wait_for(wait) != std::future_status::ready)
            throw Error(504, "timeout", "the WebMCP service did not answer in time");
        auto answer = future.get();
        int status = answer.value("status", 500);
        const json &body = answer.contains("body") ? answer["body"] : json();
        if (status >= 400) {
            std::string code = body.value("code", "internal");
            std::string message = body.value("message", "the WebMCP service failed");
            if (code == "invalid_input") throw Error::bad_request(message, {{"invalid_input", message}});
            throw Error(status, code, message);
        }
        if (body.is_null())
            res.status(204);
        else
            res.json(body);
    }

    std::string node_;
    std::string dir_;
    std::string endpoint_;
    std::string unavailable_;
    std::mutex mu_; // executors_, their fields, repl_, repl_id_, webmcp_
    std::map<std::string, std::shared_ptr<Executor>> executors_;
    std::mutex repl_mu_; // REPL calls run one after another (taken before mu_)
    std::shared_ptr<NodeChild> repl_;
    std::string repl_id_;
    std::shared_ptr<NodeChild> webmcp_;
};

} // namespace

HANGAR_PLUGIN(PlaywrightPlugin, "playwright", "0.2.0", "browsers", nullptr, 0)
