#include "relay/auth/jwt.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include <fstream>
#include <sstream>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "relay/base/digest.h"

namespace relay::auth {
namespace {

std::string B64(std::string_view bytes) { return absl::WebSafeBase64Escape(absl::string_view(bytes.data(), bytes.size())); }

bool Unb64(absl::string_view in, std::string* out) { return absl::WebSafeBase64Unescape(in, out); }

std::shared_ptr<EVP_PKEY> Own(EVP_PKEY* key) { return std::shared_ptr<EVP_PKEY>(key, EVP_PKEY_free); }

absl::StatusOr<boost::json::object> ParseObject(absl::string_view b64, const char* what) {
  std::string json;
  if (!Unb64(b64, &json)) return absl::UnauthenticatedError(std::string("JWT ") + what + " is not base64url");
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(json, ec);
  if (ec || !v.is_object()) return absl::UnauthenticatedError(std::string("JWT ") + what + " is not a JSON object");
  return std::move(v.as_object());
}

}  // namespace

absl::Status RsaKey::PrepareVerifier() {
  std::shared_ptr<EVP_MD_CTX> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, Sha256Md(), nullptr, key_.get()) != 1) {
    return absl::InvalidArgumentError("the RSA key cannot verify RS256");
  }
  verifier_ = std::move(ctx);
  return absl::OkStatus();
}

absl::StatusOr<RsaKey> RsaKey::FromPem(std::string_view pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  RsaKey key;
  if (EVP_PKEY* priv = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)) {
    key.key_ = Own(priv);
    key.private_ = true;
  } else {
    BIO_reset(bio.get());
    EVP_PKEY* pub = PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr);
    if (!pub) return absl::InvalidArgumentError("not a PEM RSA private or public key");
    key.key_ = Own(pub);
  }
  if (EVP_PKEY_get_base_id(key.key_.get()) != EVP_PKEY_RSA) return absl::InvalidArgumentError("the PEM key is not RSA");
  if (EVP_PKEY_get_bits(key.key_.get()) < 2048) return absl::InvalidArgumentError("RSA keys shorter than 2048 bits are refused");
  if (absl::Status st = key.PrepareVerifier(); !st.ok()) return st;
  return key;
}

absl::StatusOr<RsaKey> RsaKey::LoadPem(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  auto key = FromPem(text.str());
  if (!key.ok()) return absl::InvalidArgumentError(path + ": " + std::string(key.status().message()));
  return key;
}

absl::StatusOr<RsaKey> RsaKey::FromJwk(std::string_view n, std::string_view e) {
  std::string nb, eb;
  if (!Unb64(absl::string_view(n.data(), n.size()), &nb) || !Unb64(absl::string_view(e.data(), e.size()), &eb) ||
      nb.empty() || eb.empty()) {
    return absl::InvalidArgumentError("JWK n/e are not base64url");
  }
  std::unique_ptr<BIGNUM, decltype(&BN_free)> bn_n(
      BN_bin2bn(reinterpret_cast<const unsigned char*>(nb.data()), static_cast<int>(nb.size()), nullptr), BN_free);
  std::unique_ptr<BIGNUM, decltype(&BN_free)> bn_e(
      BN_bin2bn(reinterpret_cast<const unsigned char*>(eb.data()), static_cast<int>(eb.size()), nullptr), BN_free);
  std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> bld(OSSL_PARAM_BLD_new(), OSSL_PARAM_BLD_free);
  OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, bn_n.get());
  OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, bn_e.get());
  std::unique_ptr<OSSL_PARAM, decltype(&OSSL_PARAM_free)> params(OSSL_PARAM_BLD_to_param(bld.get()), OSSL_PARAM_free);
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr),
                                                                 EVP_PKEY_CTX_free);
  EVP_PKEY* pkey = nullptr;
  if (!ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &pkey, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    return absl::InvalidArgumentError("JWK is not a usable RSA public key");
  }
  RsaKey key;
  key.key_ = Own(pkey);
  if (EVP_PKEY_get_bits(pkey) < 2048) return absl::InvalidArgumentError("RSA keys shorter than 2048 bits are refused");
  if (absl::Status st = key.PrepareVerifier(); !st.ok()) return st;
  return key;
}

absl::StatusOr<std::string> SignRs256(const boost::json::object& claims, const RsaKey& key, std::string_view kid) {
  if (!key.is_private()) return absl::FailedPreconditionError("signing needs a private key");
  boost::json::object header{{"alg", "RS256"}, {"typ", "JWT"}};
  if (!kid.empty()) header["kid"] = kid;
  std::string input = B64(boost::json::serialize(header)) + "." + B64(boost::json::serialize(claims));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  size_t len = 0;
  if (EVP_DigestSignInit(ctx.get(), nullptr, Sha256Md(), nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(input.data()), input.size()) != 1) {
    return absl::InternalError("RS256 signing failed");
  }
  std::string signature(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &len,
                     reinterpret_cast<const unsigned char*>(input.data()), input.size()) != 1) {
    return absl::InternalError("RS256 signing failed");
  }
  signature.resize(len);
  return input + "." + B64(signature);
}

absl::StatusOr<boost::json::object> PeekHeader(std::string_view token) {
  std::vector<absl::string_view> parts = absl::StrSplit(absl::string_view(token.data(), token.size()), '.');
  if (parts.size() != 3) return absl::UnauthenticatedError("JWT must have three parts");
  return ParseObject(parts[0], "header");
}

absl::StatusOr<VerifiedJwt> VerifyRs256(std::string_view token, const RsaKey& key) {
  std::vector<absl::string_view> parts = absl::StrSplit(absl::string_view(token.data(), token.size()), '.');
  if (parts.size() != 3) return absl::UnauthenticatedError("JWT must have three parts");
  VerifiedJwt out;
  auto header = ParseObject(parts[0], "header");
  if (!header.ok()) return header.status();
  out.header = std::move(*header);
  const boost::json::value* alg = out.header.if_contains("alg");
  // Only RS256: "none", HS256 keyed with the public key and the like are
  // refused before any cryptography runs.
  if (!alg || !alg->is_string() || alg->as_string() != "RS256") {
    return absl::UnauthenticatedError("JWT alg must be RS256");
  }
  std::string signature;
  if (!Unb64(parts[2], &signature) || signature.empty()) return absl::UnauthenticatedError("JWT signature is not base64url");
  std::string_view input = token.substr(0, parts[0].size() + 1 + parts[1].size());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  // A copy of the key's prepared context (read concurrently by every
  // verifying thread; EVP_MD_CTX_copy_ex only reads its source).
  if (!key.verifier() || EVP_MD_CTX_copy_ex(ctx.get(), key.verifier()) != 1 ||
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                       reinterpret_cast<const unsigned char*>(input.data()), input.size()) != 1) {
    return absl::UnauthenticatedError("JWT signature does not verify");
  }
  auto claims = ParseObject(parts[1], "claims");
  if (!claims.ok()) return claims.status();
  out.claims = std::move(*claims);
  return out;
}

}  // namespace relay::auth
