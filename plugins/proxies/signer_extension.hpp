// Hangar's signer extension (signer-extension/): signs WebSocket upgrade requests, which CDP
// Fetch interception never pauses, through blocking webRequest, which Manifest V3 grants only to
// extensions installed by policy. Chromium installs such an extension only from a CRX3 file named
// by an update manifest, so each signing instance packs one (a fresh ECDSA P-256 key: the
// extension id is this instance's own) and the browsers plugin force-installs it by policy.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace proxies::extension {

// The extension asks for its key here; the agent's interception answers it (signer.cpp) and
// nothing else does: Chromium keeps every *.hangar.invalid name past its proxy and resolves it to
// "not found" itself (browsers' chromium_launch.hpp, kHangarHosts), so an ask made before the
// interception is on never leaves the browser.
inline constexpr const char *kHandoffHost = "signer.hangar.invalid";
inline constexpr const char *kHandoffUrl = "http://signer.hangar.invalid/key";
inline constexpr const char *kVersion = "1.0";

using Files = std::vector<std::pair<std::string, std::string>>; // name, content

// manifest.json, sw.js and tweetnacl (Debian node-tweetnacl), built into the plugin.
const Files &files();

// A zip of `files`, stored (no compression): what a CRX carries.
std::string zip(const Files &files);

// Chromium's extension id of a public key (DER SubjectPublicKeyInfo): the first 16 bytes of its
// SHA-256, each nibble written as a letter a-p.
std::string id_of(std::string_view public_key_der);

struct Packed {
    std::string id;
    std::string crx;
};
// A CRX3 of `zip_bytes` signed with a new ECDSA P-256 key (the id is that key's).
Packed pack(std::string_view zip_bytes);

// Chromium's update manifest (gupdate XML) offering `crx_url` as version kVersion of `id`.
std::string update_manifest(std::string_view id, std::string_view crx_url);

} // namespace proxies::extension
