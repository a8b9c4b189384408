// How the members of every pool are split over the nodes of a cluster (pure logic, unit-tested).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hangar::browsers {

struct NodeRoom {
    std::string name;
    std::int64_t max_browsers = 0; // [node] max_browsers; 0: no cap
    std::int64_t sessions = 0;     // its active sessions that are not pool members
};

struct PoolSize {
    std::string id;
    int size = 0;
};

// pool id → node name → how many members that node keeps. Each member in turn goes to the node
// with the most free capacity: the fewest browsers (its own sessions and the members handed out
// so far, of every pool) among those under their cap, the name breaking ties. Nodes alike split a
// pool evenly; a busy node takes fewer; a node at its cap takes none, and members no node has room
// for are kept by none. Every node computes the same split from the same store reads, pools in id
// order.
std::map<std::string, std::map<std::string, int>> pool_shares(std::vector<PoolSize> pools, std::vector<NodeRoom> nodes);

} // namespace hangar::browsers
