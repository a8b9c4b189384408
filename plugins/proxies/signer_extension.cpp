#include "signer_extension.hpp"

#include <Poco/Checksum.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/x509.h>

#include <cstdint>
#include <memory>
#include <stdexcept>

namespace proxies::extension {

namespace {

void le16(std::string &out, std::uint32_t v) {
    out.push_back(static_cast<char>(v & 0xff));
    out.push_back(static_cast<char>((v >> 8) & 0xff));
}

void le32(std::string &out, std::uint32_t v) {
    le16(out, v & 0xffff);
    le16(out, v >> 16);
}

// Protocol Buffers wire format: a length-delimited field (wire type 2).
void varint(std::string &out, std::uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

void bytes_field(std::string &out, std::uint32_t number, std::string_view value) {
    varint(out, (static_cast<std::uint64_t>(number) << 3) | 2);
    varint(out, value.size());
    out.append(value);
}

std::string sha256(std::string_view data) {
    std::string digest(SHA256_DIGEST_LENGTH, '\0');
    SHA256(reinterpret_cast<const unsigned char *>(data.data()), data.size(),
           reinterpret_cast<unsigned char *>(digest.data()));
    return digest;
}

struct PkeyFree {
    void operator()(EVP_PKEY *k) const { EVP_PKEY_free(k); }
};
struct PkeyCtxFree {
    void operator()(EVP_PKEY_CTX *c) const { EVP_PKEY_CTX_free(c); }
};
struct MdCtxFree {
    void operator()(EVP_MD_CTX *c) const { EVP_MD_CTX_free(c); }
};

std::unique_ptr<EVP_PKEY, PkeyFree> p256_key() {
    std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr));
    EVP_PKEY *key = nullptr;
    if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 ||
        EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx.get(), NID_X9_62_prime256v1) != 1 ||
        EVP_PKEY_keygen(ctx.get(), &key) != 1)
        throw std::runtime_error("cannot make the signer extension's key");
    return std::unique_ptr<EVP_PKEY, PkeyFree>(key);
}

std::string public_der(EVP_PKEY *key) {
    unsigned char *der = nullptr;
    int n = i2d_PUBKEY(key, &der);
    if (n <= 0) throw std::runtime_error("cannot encode the signer extension's key");
    std::string out(reinterpret_cast<char *>(der), static_cast<std::size_t>(n));
    OPENSSL_free(der);
    return out;
}

std::string ecdsa_sha256(EVP_PKEY *key, std::string_view message) {
    std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
    std::size_t n = 0;
    if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) != 1 ||
        EVP_DigestSign(ctx.get(), nullptr, &n, reinterpret_cast<const unsigned char *>(message.data()),
                       message.size()) != 1)
        throw std::runtime_error("cannot sign the signer extension");
    std::string sig(n, '\0');
    if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char *>(sig.data()), &n,
                       reinterpret_cast<const unsigned char *>(message.data()), message.size()) != 1)
        throw std::runtime_error("cannot sign the signer extension");
    sig.resize(n);
    return sig;
}

} // namespace

std::string zip(const Files &files) {
    std::string out, central;
    for (const auto &[name, content] : files) {
        Poco::Checksum crc(Poco::Checksum::TYPE_CRC32);
        crc.update(content.data(), static_cast<unsigned>(content.size()));
        auto offset = static_cast<std::uint32_t>(out.size());
        auto size = static_cast<std::uint32_t>(content.size());
        // Local header: version 2.0, no flags, stored, 1980-01-01 00:00.
        le32(out, 0x04034b50);
        for (std::uint32_t v : {20U, 0U, 0U, 0U, 0x21U})
            le16(out, v);
        le32(out, crc.checksum());
        le32(out, size);
        le32(out, size);
        le16(out, static_cast<std::uint32_t>(name.size()));
        le16(out, 0);
        out += name;
        out += content;
        le32(central, 0x02014b50);
        for (std::uint32_t v : {20U, 20U, 0U, 0U, 0U, 0x21U})
            le16(central, v);
        le32(central, crc.checksum());
        le32(central, size);
        le32(central, size);
        le16(central, static_cast<std::uint32_t>(name.size()));
        for (int i = 0; i < 4; ++i) // extra, comment, disk, internal attributes
            le16(central, 0);
        le32(central, 0); // external attributes
        le32(central, offset);
        central += name;
    }
    auto central_at = static_cast<std::uint32_t>(out.size());
    out += central;
    le32(out, 0x06054b50);
    le16(out, 0);
    le16(out, 0);
    le16(out, static_cast<std::uint32_t>(files.size()));
    le16(out, static_cast<std::uint32_t>(files.size()));
    le32(out, static_cast<std::uint32_t>(central.size()));
    le32(out, central_at);
    le16(out, 0);
    return out;
}

std::string id_of(std::string_view public_key_der) {
    std::string digest = sha256(public_key_der);
    std::string id;
    for (int i = 0; i < 16; ++i) {
        auto b = static_cast<unsigned char>(digest[static_cast<std::size_t>(i)]);
        id.push_back(static_cast<char>('a' + (b >> 4)));
        id.push_back(static_cast<char>('a' + (b & 0x0f)));
    }
    return id;
}

Packed pack(std::string_view zip_bytes) {
    // CRX3 (Chromium's components/crx_file/crx3.proto): "Cr24", version 3, the header's length,
    // a CrxFileHeader {sha256_with_ecdsa = 3: {public_key = 1, signature = 2}, signed_header_data
    // = 10000: SignedData {crx_id = 1}}, then the zip. The signature covers "CRX3 SignedData\0",
    // the signed header data's length and bytes, and the zip.
    auto key = p256_key();
    std::string der = public_der(key.get());
    std::string signed_data;
    bytes_field(signed_data, 1, sha256(der).substr(0, 16));
    std::string message("CRX3 SignedData\0", 16);
    le32(message, static_cast<std::uint32_t>(signed_data.size()));
    message += signed_data;
    message += zip_bytes;
    std::string proof;
    bytes_field(proof, 1, der);
    bytes_field(proof, 2, ecdsa_sha256(key.get(), message));
    std::string header;
    bytes_field(header, 3, proof);
    bytes_field(header, 10000, signed_data);
    std::string crx = "Cr24";
    le32(crx, 3);
    le32(crx, static_cast<std::uint32_t>(header.size()));
    crx += header;
    crx += zip_bytes;
    return {id_of(der), std::move(crx)};
}

std::string update_manifest(std::string_view id, std::string_view crx_url) {
    return "<?xml version='1.0' encoding='UTF-8'?>\n"
           "<gupdate xmlns='http://www.google.com/update2/response' protocol='2.0'>\n"
           "  <app appid='" +
           std::string(id) + "'><updatecheck codebase='" + std::string(crx_url) + "' version='" + kVersion +
           "'/></app>\n</gupdate>\n";
}

} // namespace proxies::extension
