#include "relay/auth/callers.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace relay::auth {
namespace {

std::array<uint8_t, 32> Digest(std::string_view token) {
  std::array<uint8_t, 32> out{};
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), out.data());
  return out;
}

}  // namespace

std::string ServiceTokenDigest(std::string_view token) {
  auto d = Digest(token);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

absl::StatusOr<std::vector<ServiceToken>> ParseServiceTokens(std::string_view yaml, std::string_view origin) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("tokens file ", std::string(origin), ": ", why));
  };
  std::vector<ServiceToken> out;
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    if (!root.IsMap() || !root["tokens"] || !root["tokens"].IsSequence()) return bad("needs a `tokens:` list");
    std::set<std::string> names;
    for (const auto& e : root["tokens"]) {
      ServiceToken t;
      if (!e.IsMap()) return bad("every entry is a map (name, team, role, sha256)");
      t.name = e["name"] ? e["name"].as<std::string>() : "";
      t.team = e["team"] ? e["team"].as<std::string>() : "";
      std::string role = e["role"] ? e["role"].as<std::string>() : "member";
      std::string hex = e["sha256"] ? absl::AsciiStrToLower(e["sha256"].as<std::string>()) : "";
      if (t.name.empty()) return bad("an entry without a name");
      if (!names.insert(t.name).second) return bad("token " + t.name + " is listed twice");
      if (t.team.empty()) return bad("token " + t.name + " has no team");
      if (role != "member" && role != "admin") return bad("token " + t.name + ": role is member or admin, not " + role);
      t.admin = role == "admin";
      if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
        return bad("token " + t.name + ": sha256 must be 64 hex digits (the token's SHA-256, never the token)");
      }
      std::string raw = absl::HexStringToBytes(hex);
      std::copy(raw.begin(), raw.end(), t.sha256.begin());
      out.push_back(std::move(t));
    }
  } catch (const YAML::Exception& e) {
    return bad(e.what());
  }
  return out;
}

absl::StatusOr<std::vector<ServiceToken>> LoadServiceTokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError("cannot read tokens file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseServiceTokens(ss.str(), path);
}

absl::StatusOr<std::unique_ptr<CallerAuthenticator>> CallerAuthenticator::New(std::vector<ServiceToken> tokens,
                                                                              std::unique_ptr<OidcVerifier> oidc,
                                                                              std::string team_claim) {
  if (tokens.empty() && !oidc) return absl::InvalidArgumentError("no service tokens and no OIDC issuer: nobody could call");
  std::unique_ptr<CallerAuthenticator> a(new CallerAuthenticator());
  a->tokens_ = std::move(tokens);
  a->oidc_ = std::move(oidc);
  a->team_claim_ = std::move(team_claim);
  return a;
}

absl::StatusOr<Caller> CallerAuthenticator::Authenticate(std::string_view authorization) const {
  if (authorization.empty()) return absl::UnauthenticatedError("no credentials: send authorization: Bearer <token>");
  if (!absl::StartsWithIgnoreCase(absl::string_view(authorization.data(), authorization.size()), "bearer ")) {
    return absl::UnauthenticatedError("authorization is not a Bearer token");
  }
  std::string token(absl::StripAsciiWhitespace(std::string(authorization.substr(7))));
  if (token.empty()) return absl::UnauthenticatedError("empty bearer token");
  // A JWT has two dots; service tokens are opaque strings. Try the tokens
  // first: hashing is cheap, a JWT check may fetch keys.
  if (!tokens_.empty()) {
    auto d = Digest(token);
    const ServiceToken* match = nullptr;
    for (const auto& t : tokens_) {
      if (CRYPTO_memcmp(t.sha256.data(), d.data(), d.size()) == 0) match = &t;
    }
    if (match) return Caller{match->name, match->team, match->admin, "token"};
  }
  if (oidc_ && std::count(token.begin(), token.end(), '.') == 2) {
    auto identity = oidc_->Verify(token);
    if (!identity.ok()) return identity.status();
    const boost::json::value* team = identity->claims.if_contains(team_claim_);
    if (!team || !team->is_string() || team->as_string().empty()) {
      return absl::UnauthenticatedError("the token has no " + team_claim_ + " claim to name a team");
    }
    return Caller{identity->repository, std::string(team->as_string()), false, "oidc"};
  }
  return absl::UnauthenticatedError("unknown token");
}

}  // namespace relay::auth
