#include "relay/auth/jwt.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/fixtures.h"
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <boost/json/serialize.hpp>

#include "absl/strings/escaping.h"

namespace relay::auth {
namespace {

using ::testing::HasSubstr;


TEST(JwtTest, SignsAndVerifiesRs256) {
  auto [priv_pem, pub_pem] = relay::testing::NewRsaKeyPairPem();
  auto priv = RsaKey::FromPem(priv_pem);
  auto pub = RsaKey::FromPem(pub_pem);
  ASSERT_TRUE(priv.ok() && pub.ok());
  EXPECT_TRUE(priv->is_private());
  EXPECT_FALSE(pub->is_private());
  auto token = SignRs256({{"iss", "12345"}, {"iat", 100}, {"exp", 700}}, *priv, "key-1");
  ASSERT_TRUE(token.ok()) << token.status();
  auto verified = VerifyRs256(*token, *pub);
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->claims.at("iss").as_string(), "12345");
  EXPECT_EQ(verified->header.at("kid").as_string(), "key-1");
  EXPECT_EQ(PeekHeader(*token)->at("kid").as_string(), "key-1");
  EXPECT_FALSE(SignRs256({{"a", 1}}, *pub).ok());  // a public key cannot sign
}

TEST(JwtTest, RefusesOtherKeysAlgorithmsAndTampering) {
  auto [priv_pem, pub_pem] = relay::testing::NewRsaKeyPairPem();
  auto [other_priv, other_pub] = relay::testing::NewRsaKeyPairPem();
  auto priv = RsaKey::FromPem(priv_pem);
  auto pub = RsaKey::FromPem(pub_pem);
  auto stranger = RsaKey::FromPem(other_priv);
  std::string good = *SignRs256({{"sub", "a"}}, *priv);
  EXPECT_THAT(std::string(VerifyRs256(*SignRs256({{"sub", "a"}}, *stranger), *pub).status().message()),
              HasSubstr("does not verify"));
  // The claims changed under the signature.
  std::string tampered = good;
  auto first_dot = tampered.find('.'), second_dot = tampered.find('.', first_dot + 1);
  tampered.replace(first_dot + 1, second_dot - first_dot - 1, absl::WebSafeBase64Escape(R"({"sub":"b"})"));
  EXPECT_FALSE(VerifyRs256(tampered, *pub).ok());
  // alg none, and HS256 keyed with the public key (algorithm confusion).
  std::string claims = absl::WebSafeBase64Escape(R"({"sub":"a"})");
  std::string none = absl::WebSafeBase64Escape(R"({"alg":"none","typ":"JWT"})") + "." + claims + ".";
  EXPECT_THAT(std::string(VerifyRs256(none, *pub).status().message()), HasSubstr("RS256"));
  std::string hs_input = absl::WebSafeBase64Escape(R"({"alg":"HS256","typ":"JWT"})") + "." + claims;
  unsigned char mac[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), pub_pem.data(), static_cast<int>(pub_pem.size()),
       reinterpret_cast<const unsigned char*>(hs_input.data()), hs_input.size(), mac, &len);
  std::string hs = hs_input + "." + absl::WebSafeBase64Escape(absl::string_view(reinterpret_cast<char*>(mac), len));
  EXPECT_TRUE(absl::IsUnauthenticated(VerifyRs256(hs, *pub).status()));
  for (const char* junk : {"", "a.b", "a.b.c", "!!.!!.!!"}) EXPECT_FALSE(VerifyRs256(junk, *pub).ok()) << junk;
}

TEST(JwtTest, KeysFromJwkAndRefusalOfWeakOrForeignKeys) {
  auto [priv_pem, pub_pem] = relay::testing::NewRsaKeyPairPem();
  auto priv = RsaKey::FromPem(priv_pem);
  // n and e of the public key, as a JWKS would carry them.
  BIGNUM* n = nullptr;
  BIGNUM* e = nullptr;
  EVP_PKEY_get_bn_param(priv->get(), "n", &n);
  EVP_PKEY_get_bn_param(priv->get(), "e", &e);
  auto b64 = [](BIGNUM* bn) {
    std::string bytes(static_cast<size_t>(BN_num_bytes(bn)), '\0');
    BN_bn2bin(bn, reinterpret_cast<unsigned char*>(bytes.data()));
    return absl::WebSafeBase64Escape(bytes);
  };
  auto jwk = RsaKey::FromJwk(b64(n), b64(e));
  BN_free(n);
  BN_free(e);
  ASSERT_TRUE(jwk.ok()) << jwk.status();
  EXPECT_TRUE(VerifyRs256(*SignRs256({{"x", 1}}, *priv), *jwk).ok());
  EXPECT_FALSE(RsaKey::FromPem("not a key").ok());
  EXPECT_FALSE(RsaKey::FromJwk("", "AQAB").ok());
}

}  // namespace
}  // namespace relay::auth
