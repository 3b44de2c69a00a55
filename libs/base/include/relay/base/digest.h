// SHA-256 and hex: the one place relay computes digests for ids, checksums
// and dedup keys (OpenSSL's EVP underneath).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace relay {

// SHA-256 of `data`.
std::array<uint8_t, 32> Sha256(std::string_view data);

// Lower-case hex of bytes.
std::string Hex(std::string_view bytes);

// Hex(Sha256(data)): 64 lower-case hex digits.
std::string Sha256Hex(std::string_view data);

}  // namespace relay
