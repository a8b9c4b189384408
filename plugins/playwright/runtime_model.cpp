#include "runtime_model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace playwright {

using hangar::Error;
using hangar::json;

double timeout_seconds(const json &body) {
    auto it = body.find("timeout_sec");
    if (it == body.end() || it->is_null()) return kDefaultTimeoutSec;
    if (!it->is_number()) throw Error::invalid("timeout_sec", "must be a number");
    double v = it->get<double>();
    if (!std::isfinite(v) || v <= 0 || v > kMaxTimeoutSec)
        throw Error::invalid("timeout_sec", "must be greater than 0 and at most 300");
    return v;
}

std::string executor_name(const json &body) {
    auto it = body.find("executor");
    if (it == body.end() || it->is_null()) return kDefaultExecutor;
    if (!it->is_string()) throw Error::invalid("executor", "must be a string");
    const auto &name = it->get_ref<const std::string &>();
    bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '-' || c == '_' || c == '.';
    });
    if (!ok) throw Error::invalid("executor", "must be 1-64 letters, digits, '-', '_' or '.'");
    return name;
}

void check_executor_cap(const std::vector<std::string> &named, const std::string &name) {
    if (name == kDefaultExecutor || std::find(named.begin(), named.end(), name) != named.end()) return;
    if (named.size() < kMaxNamedExecutors) return;
    std::string list;
    for (const auto &n : named)
        list += (list.empty() ? "" : ", ") + n;
    throw Error(409, "conflict",
                "this browser already has " + std::to_string(kMaxNamedExecutors) + " named Playwright executors (" +
                    list + "); delete one before starting \"" + name + "\"");
}

ExecuteCall execute_call(const json &body) {
    ExecuteCall call;
    auto code = body.find("code");
    if (code == body.end() || code->is_null()) throw Error::invalid("code", "required");
    if (!code->is_string()) throw Error::invalid("code", "must be a string");
    call.code = code->get<std::string>();
    if (call.code.empty()) throw Error::invalid("code", "must not be empty");
    call.timeout_sec = timeout_seconds(body);
    call.executor = executor_name(body);
    return call;
}

ReplCall repl_call(const json &body) {
    ReplCall call;
    if (auto r = body.find("reset"); r != body.end() && !r->is_null()) {
        if (!r->is_boolean()) throw Error::invalid("reset", "must be a boolean");
        call.reset = r->get<bool>();
    }
    auto code = body.find("code");
    if (code == body.end() || code->is_null()) throw Error::invalid("code", "required");
    if (!code->is_string()) throw Error::invalid("code", "must be a string");
    call.code = code->get<std::string>();
    if (call.code.empty() && !call.reset) throw Error::invalid("code", "must not be empty unless reset is true");
    call.timeout_sec = timeout_seconds(body);
    return call;
}

InvokeCall invoke_call(const json &body) {
    InvokeCall call;
    auto ref = body.find("tool_ref");
    if (ref == body.end() || !ref->is_string() || ref->get_ref<const std::string &>().empty())
        throw Error::invalid("tool_ref", "required: a tool_ref from GET /browsers/{id}/webmcp/tools");
    call.tool_ref = ref->get<std::string>();
    auto input = body.find("input");
    if (input == body.end() || !input->is_object()) throw Error::invalid("input", "required: an object");
    if (input->dump().size() > kMaxToolInputBytes) throw Error::invalid("input", "must be at most 1 MiB as JSON");
    call.input = *input;
    call.timeout_sec = timeout_seconds(body);
    return call;
}

void check_custom_tools_body(const json &body) {
    auto ns = body.find("namespace");
    if (ns == body.end() || !ns->is_string() || ns->get_ref<const std::string &>().empty())
        throw Error::invalid("namespace", "required: a non-empty string");
    auto source = body.find("source");
    if (source == body.end() || !source->is_string() || source->get_ref<const std::string &>().empty())
        throw Error::invalid("source", "required: a JavaScript expression");
    if (source->get_ref<const std::string &>().size() > kMaxCustomToolSourceBytes)
        throw Error::invalid("source", "must be at most 8,000,000 bytes as UTF-8");
    if (auto f = body.find("force_overwrite_namespace"); f != body.end() && !f->is_null() && !f->is_boolean())
        throw Error::invalid("force_overwrite_namespace", "must be a boolean");
}

} // namespace playwright
