#include "relay/auth/relay_token.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/escaping.h"

namespace relay::auth {
namespace {

using ::testing::HasSubstr;

constexpr char kKeys[] = R"(
signing_key: k2
keys:
  k1: old-secret-0123456789-0123456789-abcdef
  k2: new-secret-0123456789-0123456789-abcdef
)";

TEST(RelayTokenTest, SignsWithTheSigningKeyAndVerifiesAnyListedKey) {
  auto keys = RelayTokenKeys::Parse(kKeys, "test");
  ASSERT_TRUE(keys.ok()) << keys.status();
  std::string token = keys->Sign("delivery-1", "intel/torch-xpu", 1'000, 3'600);
  EXPECT_EQ(token.rfind("rt1.k2.", 0), 0u);
  auto claims = keys->Verify(token, 1'100);
  ASSERT_TRUE(claims.ok()) << claims.status();
  EXPECT_EQ(claims->delivery_id, "delivery-1");
  EXPECT_EQ(claims->repo, "intel/torch-xpu");
  EXPECT_EQ(claims->issued_at, 1'000);
  EXPECT_EQ(claims->expires_at, 4'600);
  EXPECT_EQ(claims->key_id, "k2");
  // A token from before a rotation (signed with k1) still verifies.
  auto old_keys = RelayTokenKeys::Parse("signing_key: k1\nkeys:\n  k1: old-secret-0123456789-0123456789-abcdef\n", "old");
  ASSERT_TRUE(old_keys.ok());
  EXPECT_TRUE(keys->Verify(old_keys->Sign("d", "a/b", 1'000, 60), 1'010).ok());
}

TEST(RelayTokenTest, RefusesExpiredAlteredForgedAndUnknownKeyTokens) {
  auto keys = RelayTokenKeys::Parse(kKeys, "test");
  ASSERT_TRUE(keys.ok());
  std::string token = keys->Sign("delivery-1", "intel/torch-xpu", 1'000, 3'600);
  EXPECT_TRUE(keys->Verify(token, 4'600 + 60).ok());  // within the skew
  EXPECT_THAT(std::string(keys->Verify(token, 4'600 + 61).status().message()), HasSubstr("expired"));
  // Another repo's claims under the same MAC.
  std::string payload;
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = token.find('.', start)) != std::string::npos; start = dot + 1) parts.push_back(token.substr(start, dot - start));
  parts.push_back(token.substr(start));
  std::string forged_claims = absl::WebSafeBase64Escape(R"({"d":"delivery-1","r":"evil/repo","iat":1000,"exp":4600})");
  std::string altered = parts[0] + "." + parts[1] + "." + forged_claims + "." + parts[3];
  EXPECT_THAT(std::string(keys->Verify(altered, 1'100).status().message()), HasSubstr("does not verify"));
  // Signed with a key the relay does not have.
  auto stranger = RelayTokenKeys::Parse("signing_key: k2\nkeys:\n  k2: some-other-secret-0123456789-0123456789\n", "x");
  ASSERT_TRUE(stranger.ok());
  EXPECT_FALSE(keys->Verify(stranger->Sign("delivery-1", "intel/torch-xpu", 1'000, 60), 1'010).ok());
  auto unknown = RelayTokenKeys::Parse("signing_key: k9\nkeys:\n  k9: some-other-secret-0123456789-0123456789\n", "x");
  EXPECT_THAT(std::string(keys->Verify(unknown->Sign("d", "a/b", 1'000, 60), 1'010).status().message()),
              HasSubstr("unknown key"));
  for (const char* junk : {"", "rt1", "rt1.k2.x", "rt2.k2.a.b", "rt1.k2.!!.!!"}) {
    EXPECT_TRUE(absl::IsPermissionDenied(keys->Verify(junk, 1'000).status())) << junk;
  }
}

TEST(RelayTokenTest, KeysFileMustBeSound) {
  EXPECT_THAT(std::string(RelayTokenKeys::Parse("signing_key: a\nkeys:\n  a: short\n", "f").status().message()),
              HasSubstr("at least 32"));
  EXPECT_THAT(std::string(RelayTokenKeys::Parse("signing_key: b\nkeys:\n  a: 0123456789-0123456789-0123456789\n", "f")
                              .status()
                              .message()),
              HasSubstr("not among the keys"));
  EXPECT_FALSE(RelayTokenKeys::Parse("keys: [a]\n", "f").ok());
  EXPECT_FALSE(RelayTokenKeys::Load("/nonexistent/keys.yaml").ok());
}

}  // namespace
}  // namespace relay::auth
