// Callers of operator APIs: hashed service tokens and OIDC tokens give a
// name and a team; everything else is refused with a reason.
#include "relay/auth/callers.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "support/fixtures.h"

namespace relay::auth {
namespace {

namespace json = boost::json;

constexpr char kIssuer[] = "https://token.actions.githubusercontent.com";

std::string TokensYaml() {
  return "tokens:\n"
         "  - {name: ml-ci, team: ml-infra, sha256: " + ServiceTokenDigest("s3cret-ml") + "}\n"
         "  - {name: ops, team: platform, role: admin, sha256: " + ServiceTokenDigest("s3cret-ops") + "}\n";
}

TEST(CallersTest, ServiceTokensNameTheirTeamAndRole) {
  auto tokens = ParseServiceTokens(TokensYaml(), "test");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  auto a = CallerAuthenticator::New(*tokens, nullptr);
  ASSERT_TRUE(a.ok());
  auto ml = (*a)->Authenticate("Bearer s3cret-ml");
  ASSERT_TRUE(ml.ok()) << ml.status();
  EXPECT_EQ(ml->name, "ml-ci");
  EXPECT_EQ(ml->team, "ml-infra");
  EXPECT_FALSE(ml->admin);
  auto ops = (*a)->Authenticate("bearer s3cret-ops");
  ASSERT_TRUE(ops.ok());
  EXPECT_TRUE(ops->admin);
  for (const char* bad : {"", "Bearer ", "Basic s3cret-ml", "Bearer s3cret-m", "Bearer s3cret-ml2", "s3cret-ml"}) {
    auto r = (*a)->Authenticate(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_EQ(r.status().message().find("s3cret"), std::string_view::npos) << "the reason never echoes a token";
  }
}

TEST(CallersTest, TokensFileMistakesAreNamed) {
  EXPECT_FALSE(ParseServiceTokens("tokens: {}", "t").ok());
  EXPECT_FALSE(ParseServiceTokens("tokens:\n  - {name: a, team: t, sha256: abc}\n", "t").ok());
  EXPECT_FALSE(ParseServiceTokens("tokens:\n  - {name: a, sha256: " + ServiceTokenDigest("x") + "}\n", "t").ok());
  auto twice = ParseServiceTokens("tokens:\n  - {name: a, team: t, sha256: " + ServiceTokenDigest("x") +
                                      "}\n  - {name: a, team: u, sha256: " + ServiceTokenDigest("y") + "}\n",
                                  "t");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("listed twice"), std::string_view::npos);
  auto role = ParseServiceTokens("tokens:\n  - {name: a, team: t, role: root, sha256: " + ServiceTokenDigest("x") + "}\n", "t");
  EXPECT_FALSE(role.ok());
  EXPECT_FALSE(CallerAuthenticator::New({}, nullptr).ok()) << "nobody could call";
}

TEST(CallersTest, OidcTokensTakeTheirTeamFromAClaim) {
  FakeClock clock;
  auto [priv, pub] = relay::testing::NewRsaKeyPairPem();
  RsaKey key = *RsaKey::FromPem(priv);
  std::string jwks = json::serialize(json::object{{"keys", json::array{*ToJwk(key, "k1")}}});
  auto verifier = OidcVerifier::New({OidcIssuer{kIssuer, "relay-lifecycle", "https://jwks", "", "repository", {}, {}}},
                                    {}, &clock,
                                    [&](const std::string&, std::chrono::milliseconds) -> absl::StatusOr<std::string> {
                                      return jwks;
                                    });
  ASSERT_TRUE(verifier.ok());
  auto a = CallerAuthenticator::New({}, std::move(*verifier));
  ASSERT_TRUE(a.ok());
  int64_t now = clock.UnixMillis() / 1000;
  json::object claims{{"iss", kIssuer}, {"aud", "relay-lifecycle"}, {"repository", "acme/npu"},
                      {"repository_owner", "acme"}, {"iat", now}, {"nbf", now}, {"exp", now + 300}};
  auto caller = (*a)->Authenticate("Bearer " + *SignRs256(claims, key, "k1"));
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->team, "acme");
  EXPECT_EQ(caller->name, "acme/npu");
  EXPECT_FALSE(caller->admin);
  EXPECT_EQ(caller->via, "oidc");

  claims.erase("repository_owner");
  auto no_team = (*a)->Authenticate("Bearer " + *SignRs256(claims, key, "k1"));
  EXPECT_EQ(no_team.status().code(), absl::StatusCode::kUnauthenticated);
  claims["repository_owner"] = "acme";
  claims["aud"] = "someone-else";
  EXPECT_EQ((*a)->Authenticate("Bearer " + *SignRs256(claims, key, "k1")).status().code(),
            absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace relay::auth
