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
#include "absl/strings/strip.h"

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

absl::StatusOr<std::vector<OidcCallerRule>> ParseOidcCallerRules(const std::vector<std::string>& entries,
                                                                 std::string_view default_issuer) {
  std::vector<OidcCallerRule> out;
  std::set<std::string> seen;
  for (const auto& e : entries) {
    auto eq = e.find('=');
    std::string lhs(absl::StripAsciiWhitespace(e.substr(0, eq)));
    std::string issuer(default_issuer);
    // "<issuer> owner=team": the issuer is everything before the last space.
    if (auto space = lhs.find_last_of(" \t"); space != std::string::npos) {
      issuer = std::string(absl::StripAsciiWhitespace(lhs.substr(0, space)));
      lhs = lhs.substr(space + 1);
      if (issuer.find_first_of(" \t") != std::string::npos || issuer.find("://") == std::string::npos) {
        return absl::InvalidArgumentError("OIDC allow rule '" + e + "': '" + issuer +
                                          "' is not an issuer URL (write <issuer> owner=team)");
      }
    }
    std::string who = absl::AsciiStrToLower(lhs);
    std::string team(eq == std::string::npos ? "" : absl::StripAsciiWhitespace(e.substr(eq + 1)));
    if (eq == std::string::npos || who.empty() || team.empty() || issuer.empty()) {
      return absl::InvalidArgumentError("OIDC allow rule '" + e +
                                        "': write owner=team, owner/repo=team or <issuer> owner[/repo]=team");
    }
    size_t slashes = std::count(who.begin(), who.end(), '/');
    if (slashes > 1 || who.front() == '/' || who.back() == '/' ||
        who.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_./") != std::string::npos) {
      return absl::InvalidArgumentError("OIDC allow rule '" + e + "': '" + who + "' is not a GitHub owner or owner/repo");
    }
    if (!seen.insert(issuer + " " + who).second) {
      return absl::InvalidArgumentError("OIDC allow rule for '" + who + "' of " + issuer + " is listed twice");
    }
    OidcCallerRule r;
    r.issuer = issuer;
    (slashes == 0 ? r.owner : r.repository) = who;
    r.team = team;
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<CallerAuthenticator>> CallerAuthenticator::New(std::vector<ServiceToken> tokens,
                                                                              std::unique_ptr<OidcVerifier> oidc,
                                                                              std::vector<OidcCallerRule> rules) {
  if (tokens.empty() && !oidc) return absl::InvalidArgumentError("no service tokens and no OIDC issuer: nobody could call");
  if (oidc && rules.empty()) {
    return absl::InvalidArgumentError(
        "OIDC callers are on but no allow rule says who may call: any repository on GitHub can mint a token with "
        "any audience; list owners or repositories, each with its team");
  }
  for (const auto& r : rules) {
    if (oidc && !oidc->Verifies(r.issuer)) {
      return absl::InvalidArgumentError("OIDC allow rule for '" + r.owner + r.repository + "' names issuer " + r.issuer +
                                        ", which is not configured (lifecycle.oidc.issuer or the providers file)");
    }
  }
  std::unique_ptr<CallerAuthenticator> a(new CallerAuthenticator());
  a->tokens_ = std::move(tokens);
  a->oidc_ = std::move(oidc);
  for (auto& r : rules) {
    r.owner = absl::AsciiStrToLower(r.owner);
    r.repository = absl::AsciiStrToLower(r.repository);
  }
  a->rules_ = std::move(rules);
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
    // The repository claim is signed by the issuer; its owner part is the
    // owner (repository_owner carries the same for GitHub).
    std::string repo = absl::AsciiStrToLower(identity->repository);
    std::string owner = repo.substr(0, repo.find('/'));
    const OidcCallerRule* by_owner = nullptr;
    for (const auto& r : rules_) {
      // Another issuer's rule says nothing of this token: its repository
      // claim is whatever that issuer chose to sign.
      if (r.issuer != identity->issuer) continue;
      if (!r.repository.empty() && r.repository == repo) return Caller{identity->repository, r.team, false, "oidc"};
      if (!r.owner.empty() && r.owner == owner) by_owner = &r;
    }
    if (by_owner) return Caller{identity->repository, by_owner->team, false, "oidc"};
    return absl::PermissionDeniedError("OIDC caller " + identity->repository +
                                       " is not admitted by any allow rule (lifecycle.oidc.allow) of its issuer " +
                                       identity->issuer);
  }
  return absl::UnauthenticatedError("unknown token");
}

}  // namespace relay::auth
