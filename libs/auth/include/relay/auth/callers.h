// Who is calling an operator API (relay-lifecycle's gRPC today), from the
// `authorization: Bearer <token>` the call carries. Two kinds of bearer:
//
//  - static service tokens, stored hashed (a leaked tokens file does not
//    leak tokens). The tokens file (YAML):
//        tokens:
//          - name: ml-ci            # shown in logs and events, never the token
//            team: ml-infra
//            role: member           # member | admin (admins see every team)
//            sha256: <hex SHA-256 of the token>
//    Each candidate is compared in constant time (CRYPTO_memcmp over the
//    digests), every entry checked, so timing tells nothing about which
//    entry came close.
//  - OIDC ID tokens (a CI job's identity), through the same OidcVerifier the
//    collector uses; the caller's team is a claim of the token
//    (`team_claim`, default repository_owner: the GitHub organization), its
//    name the token's repository. OIDC callers are never admins.
//
// Thread-safe once built. Errors are Unauthenticated with a reason safe to
// show the caller (never the token).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "relay/auth/oidc.h"

namespace relay::auth {

struct Caller {
  std::string name;   // token name, or the OIDC repository
  std::string team;
  bool admin = false;
  std::string via;    // "token" | "oidc"
};

struct ServiceToken {
  std::string name;
  std::string team;
  bool admin = false;
  std::array<uint8_t, 32> sha256{};
};

// Parses a tokens file (see above); InvalidArgument naming the entry.
absl::StatusOr<std::vector<ServiceToken>> LoadServiceTokens(const std::string& path);
absl::StatusOr<std::vector<ServiceToken>> ParseServiceTokens(std::string_view yaml, std::string_view origin);

// The hex SHA-256 a tokens file stores for `token` (for operators' tooling).
std::string ServiceTokenDigest(std::string_view token);

class CallerAuthenticator {
 public:
  // `oidc` may be null (service tokens only); `tokens` may be empty (OIDC
  // only); not both.
  static absl::StatusOr<std::unique_ptr<CallerAuthenticator>> New(std::vector<ServiceToken> tokens,
                                                                  std::unique_ptr<OidcVerifier> oidc,
                                                                  std::string team_claim = "repository_owner");

  // `authorization` is the whole header value ("Bearer <token>").
  absl::StatusOr<Caller> Authenticate(std::string_view authorization) const;

  OidcVerifier* oidc() const { return oidc_.get(); }

 private:
  CallerAuthenticator() = default;
  std::vector<ServiceToken> tokens_;
  std::unique_ptr<OidcVerifier> oidc_;
  std::string team_claim_;
};

}  // namespace relay::auth
