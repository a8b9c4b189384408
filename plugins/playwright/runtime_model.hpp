// The playwright plugin's pure decisions: what a call to playwright/execute, the executors, the
// REPL and WebMCP may ask for (kernel-api-0131.md §1G–1I, §2.9), checked before any process is
// started, and the executor cap. No processes, no I/O: the unit tests call these directly.
#pragma once

#include <hangar/plugin.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace playwright {

inline constexpr double kDefaultTimeoutSec = 60;
inline constexpr double kMaxTimeoutSec = 300; // the host's relay gives up at 330 s
inline constexpr std::size_t kMaxNamedExecutors = 8;
inline constexpr std::size_t kMaxToolInputBytes = 1 << 20;
inline constexpr std::size_t kMaxCustomToolSourceBytes = 8'000'000;
inline constexpr const char *kDefaultExecutor = "default";

// `timeout_sec` of a body: absent or null → the default; otherwise 0 < t ≤ 300 (400 naming it).
double timeout_seconds(const hangar::json &body);

// `executor` of an execute body: absent or null → "default"; otherwise 1–64 letters, digits, '-',
// '_' or '.' (400 naming it).
std::string executor_name(const hangar::json &body);

// 409 with the current executors named when `name` would be a ninth named executor; nothing for
// one that exists already or for the default.
void check_executor_cap(const std::vector<std::string> &named, const std::string &name);

struct ExecuteCall {
    std::string code;
    double timeout_sec = kDefaultTimeoutSec;
    std::string executor = kDefaultExecutor;
};
// POST /playwright/execute: `code` a non-empty string, `timeout_sec`, `executor`.
ExecuteCall execute_call(const hangar::json &body);

struct ReplCall {
    std::string code;
    bool reset = false;
    double timeout_sec = kDefaultTimeoutSec;
};
// POST /repl: `code` a string, empty only with `reset`; `reset` a boolean.
ReplCall repl_call(const hangar::json &body);

struct InvokeCall {
    std::string tool_ref;
    hangar::json input;
    double timeout_sec = kDefaultTimeoutSec;
};
// POST /webmcp/invoke: `tool_ref` a non-empty string, `input` an object of at most 1 MiB as JSON.
InvokeCall invoke_call(const hangar::json &body);

// POST /webmcp/custom-tools: `namespace` and `source` (at most 8,000,000 UTF-8 bytes) strings,
// `force_overwrite_namespace` a boolean. What `source` evaluates to is checked where it runs.
void check_custom_tools_body(const hangar::json &body);

} // namespace playwright
