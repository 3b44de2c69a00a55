#include "relay/github/webhook_signature.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>

namespace relay::github {
namespace {

constexpr std::string_view kPrefix = "sha256=";
using Mac = std::array<unsigned char, 32>;

Mac Hmac(std::string_view secret, std::string_view body) {
  Mac mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(body.data()), body.size(), mac.data(), &len);
  return mac;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

WebhookVerifier::WebhookVerifier(std::vector<std::string> secrets) : secrets_(std::move(secrets)) {}

bool WebhookVerifier::Verify(std::string_view header, std::string_view body) const {
  if (header.size() != kPrefix.size() + 64 || header.substr(0, kPrefix.size()) != kPrefix) return false;
  Mac claimed{};
  for (size_t i = 0; i < claimed.size(); ++i) {
    int hi = HexValue(header[kPrefix.size() + 2 * i]);
    int lo = HexValue(header[kPrefix.size() + 2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    claimed[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  bool match = false;
  for (const auto& secret : secrets_) {
    Mac mac = Hmac(secret, body);
    match |= CRYPTO_memcmp(mac.data(), claimed.data(), mac.size()) == 0;
  }
  return match;
}

std::string SignWebhook(std::string_view secret, std::string_view body) {
  static constexpr char kHex[] = "0123456789abcdef";
  Mac mac = Hmac(secret, body);
  std::string out(kPrefix);
  for (unsigned char b : mac) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace relay::github
