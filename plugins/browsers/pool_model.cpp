// See pool_model.hpp.
#include "pool_model.hpp"

#include <algorithm>
#include <tuple>

namespace hangar::browsers {

std::map<std::string, std::map<std::string, int>> pool_shares(std::vector<PoolSize> pools,
                                                              std::vector<NodeRoom> nodes) {
    std::sort(pools.begin(), pools.end(), [](const PoolSize &a, const PoolSize &b) { return a.id < b.id; });
    std::map<std::string, std::map<std::string, int>> shares;
    for (const auto &pool : pools) {
        auto &split = shares[pool.id];
        for (const auto &n : nodes)
            split[n.name] = 0;
        for (int member = 0; member < pool.size; ++member) {
            NodeRoom *best = nullptr;
            for (auto &n : nodes) {
                if (n.max_browsers > 0 && n.sessions >= n.max_browsers) continue;
                if (!best || std::tie(n.sessions, n.name) < std::tie(best->sessions, best->name)) best = &n;
            }
            if (!best) break; // every node is full
            ++split[best->name];
            ++best->sessions;
        }
    }
    return shares;
}

} // namespace hangar::browsers
