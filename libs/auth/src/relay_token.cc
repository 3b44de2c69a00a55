#include "relay/auth/relay_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <fstream>
#include <sstream>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "relay/base/digest.h"

namespace relay::auth {
namespace {

constexpr std::string_view kVersion = "rt1";

bool ValidKeyId(std::string_view id) {
  if (id.empty() || id.size() > 32) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  }
  return true;
}

std::array<unsigned char, 32> Mac(std::string_view key, std::string_view data) {
  std::array<unsigned char, 32> mac{};
  unsigned int len = 0;
  HMAC(Sha256Md(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), mac.data(), &len);
  return mac;
}

std::string B64(std::string_view bytes) { return absl::WebSafeBase64Escape(absl::string_view(bytes.data(), bytes.size())); }

}  // namespace

absl::StatusOr<RelayTokenKeys> RelayTokenKeys::Parse(std::string_view yaml, std::string_view origin) {
  auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError("relay token keys " + std::string(origin) + ": " + what);
  };
  RelayTokenKeys keys;
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    if (!root.IsMap() || !root["keys"] || !root["keys"].IsMap()) return error("expected signing_key and a keys mapping");
    for (const auto& kv : root["keys"]) {
      std::string id = kv.first.as<std::string>();
      std::string secret = kv.second.as<std::string>();
      if (!ValidKeyId(id)) return error("key id '" + id + "' must be 1-32 of [A-Za-z0-9_-]");
      if (secret.size() < 32) return error("key " + id + " must be at least 32 characters");
      keys.keys_[id] = secret;
    }
    if (!root["signing_key"]) return error("signing_key is missing");
    keys.signing_key_id_ = root["signing_key"].as<std::string>();
  } catch (const YAML::Exception& e) {
    return error(e.what());
  }
  if (!keys.keys_.count(keys.signing_key_id_)) return error("signing_key '" + keys.signing_key_id_ + "' is not among the keys");
  return keys;
}

absl::StatusOr<RelayTokenKeys> RelayTokenKeys::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError("relay token keys " + path + ": cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path);
}

std::string RelayTokenKeys::Sign(std::string_view delivery_id, std::string_view repo, int64_t now,
                                 int64_t ttl_seconds) const {
  boost::json::object claims;
  claims["d"] = delivery_id;
  claims["r"] = repo;
  claims["iat"] = now;
  claims["exp"] = now + ttl_seconds;
  std::string signed_part =
      std::string(kVersion) + "." + signing_key_id_ + "." + B64(boost::json::serialize(claims));
  auto mac = Mac(keys_.at(signing_key_id_), signed_part);
  return signed_part + "." + B64(std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
}

absl::StatusOr<RelayTokenClaims> RelayTokenKeys::Verify(std::string_view token, int64_t now,
                                                        int64_t skew_seconds) const {
  std::vector<absl::string_view> parts = absl::StrSplit(absl::string_view(token.data(), token.size()), '.');
  if (parts.size() != 4 || parts[0] != absl::string_view(kVersion.data(), kVersion.size())) {
    return absl::PermissionDeniedError("relay token is malformed");
  }
  auto key = keys_.find(std::string_view(parts[1].data(), parts[1].size()));
  if (key == keys_.end()) return absl::PermissionDeniedError("relay token is signed with an unknown key");
  std::string mac;
  if (!absl::WebSafeBase64Unescape(parts[3], &mac) || mac.size() != 32) {
    return absl::PermissionDeniedError("relay token is malformed");
  }
  std::string_view signed_part = token.substr(0, token.size() - parts[3].size() - 1);
  auto expected = Mac(key->second, signed_part);
  if (CRYPTO_memcmp(expected.data(), mac.data(), expected.size()) != 0) {
    return absl::PermissionDeniedError("relay token signature does not verify");
  }
  std::string payload;
  if (!absl::WebSafeBase64Unescape(parts[2], &payload)) return absl::PermissionDeniedError("relay token is malformed");
  RelayTokenClaims claims;
  claims.key_id = key->first;
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(payload, ec);
  const boost::json::object* o = ec ? nullptr : v.if_object();
  if (!o || !o->if_contains("d") || !o->at("d").is_string() || !o->if_contains("r") || !o->at("r").is_string() ||
      !o->if_contains("iat") || !o->at("iat").is_int64() || !o->if_contains("exp") || !o->at("exp").is_int64()) {
    return absl::PermissionDeniedError("relay token claims are malformed");
  }
  claims.delivery_id = std::string(o->at("d").as_string());
  claims.repo = std::string(o->at("r").as_string());
  claims.issued_at = o->at("iat").as_int64();
  claims.expires_at = o->at("exp").as_int64();
  if (now > claims.expires_at + skew_seconds) return absl::PermissionDeniedError("relay token has expired");
  return claims;
}

}  // namespace relay::auth
