#include "relay/github/webhook_signature.h"

#include "relay/base/digest.h"
#include "relay/base/status.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

#include <algorithm>
#include <array>
#include <cctype>

#include <boost/url/parse_query.hpp>

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

WebhookVerifier::WebhookVerifier(std::vector<std::string> secrets) : secrets_(std::move(secrets)) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  RELAY_CHECK(mac != nullptr);
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
  for (const auto& secret : secrets_) {
    EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
    RELAY_CHECK(ctx != nullptr);
    RELAY_CHECK(EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), params) == 1);
    keyed_.push_back(ctx);
  }
  EVP_MAC_free(mac);
}

WebhookVerifier::~WebhookVerifier() {
  for (auto* ctx : keyed_) EVP_MAC_CTX_free(ctx);
}

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
  for (EVP_MAC_CTX* keyed : keyed_) {
    // The keyed context is shared and never written: each call MACs on its own dup.
    EVP_MAC_CTX* ctx = EVP_MAC_CTX_dup(keyed);
    Mac mac{};
    size_t len = 0;
    bool ok = ctx && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(body.data()), body.size()) == 1 &&
              EVP_MAC_final(ctx, mac.data(), &len, mac.size()) == 1 && len == mac.size();
    EVP_MAC_CTX_free(ctx);
    match |= ok && CRYPTO_memcmp(mac.data(), claimed.data(), mac.size()) == 0;
  }
  return match;
}

bool WebhookJson(std::string_view content_type, const std::string& body, std::string* decoded,
                 std::string_view* json) {
  std::string_view media = content_type.substr(0, content_type.find(';'));
  while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
  auto iequals = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
  };
  if (media.empty() || iequals(media, "application/json")) {
    *json = body;
    return true;
  }
  if (iequals(media, "application/x-www-form-urlencoded")) {
    auto params = boost::urls::parse_query(body);
    if (!params) return false;
    for (auto param : *params) {
      if (param.key == "payload" && param.has_value) {
        boost::urls::encoding_opts opts;
        opts.space_as_plus = true;
        *decoded = param.value.decode(opts);
        *json = *decoded;
        return true;
      }
    }
  }
  return false;
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
