// Relay tokens: what binds a callback to a dispatch. Dispatch puts one in
// every repository_dispatch's client_payload; the public callback action
// echoes the whole client payload back, and the collector accepts a
// callback only with a token for that delivery, that downstream repository
// and not past its expiry. The reference relay accepts any callback from an
// allowlisted repo; this closes that hole (a forged or replayed result).
//
// Token: "rt1.<key id>.<payload>.<mac>", payload = base64url of
// {"d": delivery id, "r": downstream repo, "iat": unix s, "exp": unix s},
// mac = base64url(HMAC-SHA256(key, "rt1.<key id>.<payload>")). Keys rotate:
// one signs, all listed verify. Thread-safe once built.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace relay::auth {

struct RelayTokenClaims {
  std::string key_id;
  std::string delivery_id;
  std::string repo;
  int64_t issued_at = 0;   // unix seconds
  int64_t expires_at = 0;  // unix seconds
};

class RelayTokenKeys {
 public:
  // The keys file (YAML):
  //   signing_key: k2026a        # the id new tokens are signed with
  //   keys:
  //     k2026a: <secret, at least 32 characters>
  //     k2025b: <secret>         # still verifies until removed
  static absl::StatusOr<RelayTokenKeys> Load(const std::string& path);
  static absl::StatusOr<RelayTokenKeys> Parse(std::string_view yaml, std::string_view origin);

  const std::string& signing_key_id() const { return signing_key_id_; }

  // A token for `delivery_id` dispatched to `repo` at `now`, valid for `ttl_seconds`.
  std::string Sign(std::string_view delivery_id, std::string_view repo, int64_t now, int64_t ttl_seconds) const;

  // The claims of a token whose MAC verifies under a listed key (constant
  // time) and that has not expired at `now` (`skew_seconds` allowed).
  // PermissionDenied with the reason otherwise (malformed, unknown key,
  // bad MAC, expired). The caller compares repo and delivery id.
  absl::StatusOr<RelayTokenClaims> Verify(std::string_view token, int64_t now, int64_t skew_seconds = 60) const;

 private:
  std::string signing_key_id_;
  std::map<std::string, std::string, std::less<>> keys_;
};

}  // namespace relay::auth
