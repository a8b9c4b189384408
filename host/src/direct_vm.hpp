// Kernel's direct-to-browser routes: `{base_url}/<subresource>?jwt=<token of cdp_ws_url>`, which
// the Python SDK (0.131) sends for fs, process, computer, playwright and logs/stream once it has
// seen a browser's base_url. The host verifies the token and serves the same API route as
// `/browsers/{id}/<subresource>` for the browser's project, so every plugin serves both paths.
#pragma once

#include "core.hpp"

namespace hangar::host {

// When `req` is such a request: on a valid token, rewrites it to the API route with the
// session's project as its caller and returns true; on a bad one, writes the 401/404 on `res`
// and returns true (handled). False for any other request.
bool direct_vm_request(HostCore &core, hangar_request &req, hangar_response &res);

} // namespace hangar::host
