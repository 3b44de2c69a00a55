#include "relay/base/digest.h"

#include <openssl/evp.h>

#include "relay/base/status.h"

namespace relay {

const EVP_MD* Sha256Md() {
  // Never freed: one for the process, reachable from here to its end.
  static const EVP_MD* md = [] {
    EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    RELAY_CHECK(fetched != nullptr);
    return fetched;
  }();
  return md;
}

std::array<uint8_t, 32> Sha256(std::string_view data) {
  std::array<uint8_t, 32> digest{};
  unsigned int len = 0;
  RELAY_CHECK(EVP_Digest(data.data(), data.size(), digest.data(), &len, Sha256Md(), nullptr) == 1 &&
              len == digest.size());
  return digest;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  auto digest = Sha256(data);
  return Hex(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

}  // namespace relay
