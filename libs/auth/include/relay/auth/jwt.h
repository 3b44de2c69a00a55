// RS256 JSON Web Tokens (RFC 7519, RFC 7518): signing with an RSA private
// key (the GitHub App's JWT) and verifying with a public key (the fake
// GitHub; the collector's OIDC verifier builds on it). OpenSSL does the
// cryptography; this is the JOSE framing around it, which is small and
// specific enough that a library (libjwt, cpp-jwt) would add more surface
// than it saves: only RS256 is ever accepted, so "alg":"none" and
// algorithm-confusion attacks have nothing to work with.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "absl/status/statusor.h"

struct evp_pkey_st;
struct evp_md_ctx_st;

namespace relay::auth {

// An RSA key, private (can sign and verify) or public (verify only).
class RsaKey {
 public:
  // PEM: "-----BEGIN (RSA) PRIVATE KEY-----" or "-----BEGIN PUBLIC KEY-----".
  static absl::StatusOr<RsaKey> FromPem(std::string_view pem);
  static absl::StatusOr<RsaKey> LoadPem(const std::string& path);
  // From a JWK's base64url modulus and exponent (JWKS documents).
  static absl::StatusOr<RsaKey> FromJwk(std::string_view n, std::string_view e);

  bool is_private() const { return private_; }
  evp_pkey_st* get() const { return key_.get(); }
  // A context set up once to verify RS256 with this key: VerifyRs256 copies
  // it instead of setting one up per token (OpenSSL 3 looks the algorithms
  // up again on every EVP_DigestVerifyInit: 15.5 us a verify against 13.3
  // with the copy, docs/benchmarks.md). Only read, never used itself.
  const evp_md_ctx_st* verifier() const { return verifier_.get(); }

 private:
  absl::Status PrepareVerifier();

  std::shared_ptr<evp_pkey_st> key_;
  std::shared_ptr<evp_md_ctx_st> verifier_;
  bool private_ = false;
};

// header.payload.signature with {"alg":"RS256","typ":"JWT"} (plus "kid"
// when given). FailedPrecondition for a public key.
absl::StatusOr<std::string> SignRs256(const boost::json::object& claims, const RsaKey& key, std::string_view kid = "");

struct VerifiedJwt {
  boost::json::object header;
  boost::json::object claims;
};

// Checks the form, that alg is RS256 and the signature verifies under `key`;
// returns header and claims. Time, issuer and audience checks are the
// caller's. Unauthenticated with the reason otherwise.
absl::StatusOr<VerifiedJwt> VerifyRs256(std::string_view token, const RsaKey& key);

// The header of a token, unverified (to pick a key by "kid").
absl::StatusOr<boost::json::object> PeekHeader(std::string_view token);

}  // namespace relay::auth
