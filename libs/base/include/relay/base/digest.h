// SHA-256 and hex: the one place relay computes digests for ids, checksums
// and dedup keys (OpenSSL's EVP underneath).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

struct evp_md_st;

namespace relay {

// OpenSSL's SHA-256, fetched once from the default provider. OpenSSL 3
// looks EVP_sha256() up again in its provider store (locks, a hash table)
// on every use: 500-750 ns a 200-byte digest against 200-370 ns with the
// fetched one (docs/benchmarks.md, "Verified callbacks"). For EVP_Digest*
// and EVP_DigestSign/VerifyInit; HMAC() takes it too but gains nothing (it
// looks its digest up by name on every call).
const evp_md_st* Sha256Md();

// SHA-256 of `data`.
std::array<uint8_t, 32> Sha256(std::string_view data);

// Lower-case hex of bytes.
std::string Hex(std::string_view bytes);

// Hex(Sha256(data)): 64 lower-case hex digits.
std::string Sha256Hex(std::string_view data);

}  // namespace relay
