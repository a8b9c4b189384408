// Entry point, schema and role dispatch of the browsers plugin.
#include "browsers.hpp"

namespace {

// Times are epoch milliseconds (BIGINT) so uptime is plain arithmetic on every database.
// Booleans are 0/1 integers for the same reason. tags is the rendered JSON object; the tags table
// duplicates it in a form SQL can filter on (tags[k]=v) without JSON functions, which differ
// between SQLite and PostgreSQL.
const hangar_migration migrations[] = {
    {1, R"sql(
CREATE TABLE browsers_sessions (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    key_id TEXT,
    name TEXT,
    created_at BIGINT NOT NULL,
    deleted_at BIGINT,
    timeout_seconds INTEGER NOT NULL,
    headless INTEGER NOT NULL,
    stealth INTEGER NOT NULL,
    kiosk_mode INTEGER NOT NULL,
    viewport_width INTEGER NOT NULL,
    viewport_height INTEGER NOT NULL,
    viewport_refresh_rate INTEGER NOT NULL,
    start_url TEXT,
    tags TEXT,
    chrome_policy TEXT
);
CREATE INDEX browsers_sessions_project ON browsers_sessions (project_id, deleted_at, created_at);
CREATE UNIQUE INDEX browsers_sessions_active_name ON browsers_sessions (project_id, name)
    WHERE deleted_at IS NULL AND name IS NOT NULL;
CREATE TABLE browsers_tags (
    session_id TEXT NOT NULL,
    tag_key TEXT NOT NULL,
    tag_value TEXT NOT NULL,
    PRIMARY KEY (session_id, tag_key)
);
CREATE INDEX browsers_tags_pair ON browsers_tags (tag_key, tag_value);
)sql"},
    // The profile a session started on (or had attached), and whether its end writes it back.
    {2, R"sql(
ALTER TABLE browsers_sessions ADD COLUMN profile_id TEXT;
ALTER TABLE browsers_sessions ADD COLUMN profile_save_changes INTEGER NOT NULL DEFAULT 0;
)sql"},
    // Browser pools: their definitions (the browsers themselves are re-filled at start).
    {3, R"sql(
CREATE TABLE browsers_pools (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    name TEXT,
    created_at BIGINT NOT NULL,
    config TEXT NOT NULL
);
CREATE UNIQUE INDEX browsers_pools_name ON browsers_pools (project_id, name) WHERE name IS NOT NULL;
ALTER TABLE browsers_sessions ADD COLUMN pool_id TEXT;
)sql"},
    // The proxy a session's traffic goes through (echoed as proxy_id; a live swap changes it).
    {4, R"sql(
ALTER TABLE browsers_sessions ADD COLUMN proxy_id TEXT;
)sql"},
    // The app invocation a session was created in (plugin apps): listed and ended with it.
    {5, R"sql(
ALTER TABLE browsers_sessions ADD COLUMN invocation_id TEXT;
CREATE INDEX browsers_sessions_invocation ON browsers_sessions (invocation_id) WHERE invocation_id IS NOT NULL;
)sql"},
    // The node whose runtime holds a session's instance (nodes share one store), and the node that
    // marked it deleted: the owner stops an instance another node ended (server.cpp, sweep_idle).
    {6, R"sql(
ALTER TABLE browsers_sessions ADD COLUMN node TEXT;
ALTER TABLE browsers_sessions ADD COLUMN ended_by TEXT;
CREATE INDEX browsers_sessions_node ON browsers_sessions (node, deleted_at);
)sql"},
    // Pools across nodes (pools.cpp): flushes any node made, and each node's idle members per pool,
    // where an acquire on a node with none finds another that has one.
    {7, R"sql(
ALTER TABLE browsers_pools ADD COLUMN flush_count INTEGER NOT NULL DEFAULT 0;
CREATE TABLE browsers_pool_idle (
    pool_id TEXT NOT NULL,
    node TEXT NOT NULL,
    idle INTEGER NOT NULL,
    PRIMARY KEY (pool_id, node)
);
)sql"},
    // What the Python SDK 0.131 requires in every browser object (region, memory) and the
    // session's location overrides (kernel-api-0131 §2.1–2.2).
    {8, R"sql(
ALTER TABLE browsers_sessions ADD COLUMN region TEXT;
ALTER TABLE browsers_sessions ADD COLUMN memory TEXT;
ALTER TABLE browsers_sessions ADD COLUMN location_timezone TEXT;
ALTER TABLE browsers_sessions ADD COLUMN location_locale TEXT;
)sql"},
    // network.allowed_hosts and its revision (kernel-api-0131 §2.1), as the wire shows them.
    {9, R"sql(
ALTER TABLE browsers_sessions ADD COLUMN network TEXT;
)sql"},
    // The vaults attached at create, resolved by the vaults plugin: [{id, name}] (kernel-api-0131 §2.2).
    {10, R"sql(
ALTER TABLE browsers_sessions ADD COLUMN vaults TEXT;
)sql"},
};

} // namespace

// profiles, when enabled, starts first and stops last: ending sessions at shutdown saves them.
HANGAR_PLUGIN(hangar::browsers::BrowsersPlugin, "browsers", "0.1.0", "profiles?,extensions?,proxies?", migrations,
              sizeof(migrations) / sizeof(migrations[0]))
