// Capability-token parsing (host/src/tokens.cpp, Tokens::verify) as cdp_ws_url's jwt reaches
// it: any string must give claims or nothing, never a crash or an exception. A token the fuzzer
// builds is accepted only if it carries our signature, which a mutated input cannot forge, so
// every accepted token must re-verify to the same claims.
#include "tokens.hpp"

#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    static const hangar::host::Tokens tokens(std::string(48, 'k'), 0);
    static const std::string valid = tokens.sign({{"sid", "s1"}, {"typ", "cdp"}}, 3600);
    std::string in(reinterpret_cast<const char *>(data), size);
    auto claims = tokens.verify(in);
    if (claims && (!claims->is_object() || *tokens.verify(in) != *claims)) std::abort();
    // The same bytes spliced into a real token's payload and signature positions.
    auto dot = valid.find('.');
    (void)tokens.verify(valid.substr(0, dot + 1) + in);
    (void)tokens.verify(in + valid.substr(valid.rfind('.')));
    return 0;
}
