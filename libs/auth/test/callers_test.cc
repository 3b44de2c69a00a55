// Callers of operator APIs: hashed service tokens and OIDC tokens give a
// name and a team; everything else is refused with a reason.
#include "relay/auth/callers.h"

#include <gmock/gmock.h>
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

// OIDC callers need an explicit allow rule; the team is the rule's, never
// a claim's (issue 15: any repository on GitHub can mint a token with the
// configured audience, and an organisation can be named like a team).
TEST(CallersTest, OidcCallersAreAdmittedOnlyByAnAllowRuleAndTakeItsTeam) {
  FakeClock clock;
  auto [priv, pub] = relay::testing::NewRsaKeyPairPem();
  RsaKey key = *RsaKey::FromPem(priv);
  std::string jwks = json::serialize(json::object{{"keys", json::array{*ToJwk(key, "k1")}}});
  auto verifier = [&] {
    return *OidcVerifier::New({OidcIssuer{kIssuer, "relay-lifecycle", "https://jwks", "", "repository", {}, {}}}, {},
                              &clock,
                              [&](const std::string&, std::chrono::milliseconds) -> absl::StatusOr<std::string> {
                                return jwks;
                              });
  };
  EXPECT_FALSE(CallerAuthenticator::New({}, verifier()).ok()) << "OIDC without an allow list admits all of GitHub";
  auto rules = ParseOidcCallerRules({"Acme=npu-infra", "ml-org/trainer=ml", "ml-org=ml-readers"}, kIssuer);
  ASSERT_TRUE(rules.ok()) << rules.status();
  auto a = CallerAuthenticator::New({}, verifier(), *rules);
  ASSERT_TRUE(a.ok()) << a.status();
  int64_t now = clock.UnixMillis() / 1000;
  auto token = [&](const std::string& repo, const std::string& owner_claim) {
    json::object claims{{"iss", kIssuer}, {"aud", "relay-lifecycle"}, {"repository", repo},
                        {"repository_owner", owner_claim}, {"iat", now}, {"nbf", now}, {"exp", now + 300}};
    return "Bearer " + *SignRs256(claims, key, "k1");
  };
  auto caller = (*a)->Authenticate(token("acme/npu", "acme"));
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->team, "npu-infra") << "the rule's team, not the owner's name";
  EXPECT_EQ(caller->name, "acme/npu");
  EXPECT_FALSE(caller->admin);
  EXPECT_EQ(caller->via, "oidc");
  // A repository rule wins over its owner's.
  EXPECT_EQ((*a)->Authenticate(token("ML-Org/Trainer", "ML-Org"))->team, "ml");
  EXPECT_EQ((*a)->Authenticate(token("ml-org/other", "ml-org"))->team, "ml-readers");
  // Anyone else, whatever their claims say: refused, with the reason.
  for (auto [repo, owner] : {std::pair{"evil-org/anything", "evil-org"}, std::pair{"ml/anything", "ml"},
                             std::pair{"npu-infra/x", "npu-infra"}, std::pair{"evil-org/x", "acme"}}) {
    auto refused = (*a)->Authenticate(token(repo, owner));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << repo;
    EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("not admitted")) << repo;
  }
  json::object claims{{"iss", kIssuer}, {"aud", "someone-else"}, {"repository", "acme/npu"},
                      {"iat", now}, {"nbf", now}, {"exp", now + 300}};
  EXPECT_EQ((*a)->Authenticate("Bearer " + *SignRs256(claims, key, "k1")).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(CallersTest, AllowRulesAreCheckedWhenRead) {
  EXPECT_TRUE(ParseOidcCallerRules({"acme=t", "acme/x=t"}, kIssuer).ok());
  for (const char* bad : {"acme", "=team", "acme=", "a/b/c=t", "/x=t", "acme/=t", "ac me=t", "not-a-url acme=t",
                          "https://a https://b acme=t"}) {
    EXPECT_FALSE(ParseOidcCallerRules({bad}, kIssuer).ok()) << bad;
  }
  EXPECT_FALSE(ParseOidcCallerRules({"acme=t", "ACME=u"}, kIssuer).ok()) << "listed twice";
  EXPECT_FALSE(ParseOidcCallerRules({"acme=t", std::string(kIssuer) + " acme=u"}, kIssuer).ok()) << "listed twice";
  // The same owner under two issuers is two rules.
  auto two = ParseOidcCallerRules({"acme=t", "https://agent.buildkite.com acme=u"}, kIssuer);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ((*two)[0].issuer, kIssuer);
  EXPECT_EQ((*two)[1].issuer, "https://agent.buildkite.com");
  EXPECT_EQ((*two)[1].owner, "acme");
}

// Issue 27, item 7: a second issuer in the providers file signs whatever
// repository claim it likes. A rule is bound to its issuer, so a token of
// the second issuer naming GitHub owner acme's repository gets nothing from
// acme's GitHub rule, and a rule for an issuer that is not configured is
// refused when the authenticator is built.
TEST(CallersTest, AllowRulesAreBoundToTheirIssuer) {
  constexpr char kOther[] = "https://agent.buildkite.com";
  FakeClock clock;
  auto [priv, pub] = relay::testing::NewRsaKeyPairPem();
  RsaKey key = *RsaKey::FromPem(priv);
  std::string jwks = json::serialize(json::object{{"keys", json::array{*ToJwk(key, "k1")}}});
  auto verifier = [&] {
    return *OidcVerifier::New({OidcIssuer{kIssuer, "relay-lifecycle", "https://jwks", "", "repository", {}, {}},
                               OidcIssuer{kOther, "relay-lifecycle", "https://jwks", "", "repository", {}, {}}},
                              {}, &clock,
                              [&](const std::string&, std::chrono::milliseconds) -> absl::StatusOr<std::string> {
                                return jwks;
                              });
  };
  int64_t now = clock.UnixMillis() / 1000;
  auto token = [&](const std::string& iss, const std::string& repo) {
    json::object claims{{"iss", iss}, {"aud", "relay-lifecycle"}, {"repository", repo}, {"repository_owner", "acme"},
                        {"iat", now}, {"nbf", now}, {"exp", now + 300}};
    return "Bearer " + *SignRs256(claims, key, "k1");
  };
  auto github_only = CallerAuthenticator::New({}, verifier(), *ParseOidcCallerRules({"acme=npu-infra"}, kIssuer));
  ASSERT_TRUE(github_only.ok()) << github_only.status();
  EXPECT_EQ((*github_only)->Authenticate(token(kIssuer, "acme/npu"))->team, "npu-infra");
  auto forged = (*github_only)->Authenticate(token(kOther, "acme/npu"));
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kPermissionDenied) << "another issuer's acme is not GitHub's";
  EXPECT_THAT(std::string(forged.status().message()), ::testing::HasSubstr(kOther));

  auto both = CallerAuthenticator::New(
      {}, verifier(), *ParseOidcCallerRules({"acme=npu-infra", std::string(kOther) + " acme/npu=bk-ci"}, kIssuer));
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ((*both)->Authenticate(token(kOther, "acme/npu"))->team, "bk-ci");
  EXPECT_EQ((*both)->Authenticate(token(kIssuer, "acme/npu"))->team, "npu-infra") << "GitHub's token keeps its rule";
  EXPECT_EQ((*both)->Authenticate(token(kOther, "acme/other")).status().code(), absl::StatusCode::kPermissionDenied);

  auto unknown = CallerAuthenticator::New({}, verifier(),
                                          *ParseOidcCallerRules({"https://gitlab.example.com acme=t"}, kIssuer));
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), ::testing::HasSubstr("not configured"));
}

}  // namespace
}  // namespace relay::auth
