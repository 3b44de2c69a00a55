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
//    collector uses, admitted only by an explicit allow rule: a GitHub owner
//    (every repository of it) or one repository, each mapped to the team it
//    acts as. The workflow picks a token's audience, so without such a rule
//    any repository on GitHub could call. The team is what the rule says,
//    never a claim's value: organisation names share one namespace with
//    anyone's, so an organisation named like an internal team gets nothing
//    by it. Each rule is bound to one issuer: a second issuer (a
//    providers_file entry) can sign any `repository` claim it likes, so a
//    rule written for GitHub's owner `acme` never admits another issuer's
//    token naming `acme/x`. The caller's name is the token's repository.
//    OIDC callers are never admins.
//
// Thread-safe once built. Errors are Unauthenticated (no or bad
// credentials) or PermissionDenied (a valid OIDC token no rule admits),
// with a reason safe to show the caller (never the token).
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

// Which OIDC callers are admitted, and as which team: tokens of `issuer`
// (exact `iss`) whose repository is of `owner` (every repository of that
// owner) or is `repository` (owner/name, exactly), compared
// case-insensitively as GitHub does. A repository rule wins over its
// owner's.
struct OidcCallerRule {
  std::string issuer;
  std::string owner;       // one of owner / repository
  std::string repository;
  std::string team;
};
// Rules from "owner=team" and "owner/name=team" entries (the form config
// lists take), bound to `default_issuer`, or "<issuer> owner[/name]=team"
// (the issuer, a space, then the rule) for another configured issuer;
// InvalidArgument naming the entry.
absl::StatusOr<std::vector<OidcCallerRule>> ParseOidcCallerRules(const std::vector<std::string>& entries,
                                                                 std::string_view default_issuer);

class CallerAuthenticator {
 public:
  // `oidc` may be null (service tokens only); `tokens` may be empty (OIDC
  // only); not both. With `oidc`, `rules` must not be empty (nobody on
  // GitHub would be kept out), and each rule's issuer must be one `oidc`
  // verifies (a rule for an unconfigured issuer is a typo that admits
  // nobody, or a rule meant for another issuer).
  static absl::StatusOr<std::unique_ptr<CallerAuthenticator>> New(std::vector<ServiceToken> tokens,
                                                                  std::unique_ptr<OidcVerifier> oidc,
                                                                  std::vector<OidcCallerRule> rules = {});

  // `authorization` is the whole header value ("Bearer <token>").
  absl::StatusOr<Caller> Authenticate(std::string_view authorization) const;

  OidcVerifier* oidc() const { return oidc_.get(); }

 private:
  CallerAuthenticator() = default;
  std::vector<ServiceToken> tokens_;
  std::unique_ptr<OidcVerifier> oidc_;
  std::vector<OidcCallerRule> rules_;  // lower-cased owner / repository
};

}  // namespace relay::auth
