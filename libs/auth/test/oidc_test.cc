// The OIDC verifier against tokens minted here: what GitHub Actions and
// Buildkite send is accepted, and every forgery the collector must refuse
// is refused with its reason.
#include "relay/auth/oidc.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <openssl/hmac.h>

#include <boost/json.hpp>
#include <fstream>

#include "absl/strings/escaping.h"
#include "support/fixtures.h"

namespace relay::auth {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kIssuer[] = "https://token.actions.githubusercontent.com";
constexpr char kJwksUrl[] = "https://token.actions.githubusercontent.com/.well-known/jwks";

class OidcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto [priv, pub] = relay::testing::NewRsaKeyPairPem();
    key_ = *RsaKey::FromPem(priv);
    public_pem_ = pub;
    auto [other_priv, other_pub] = relay::testing::NewRsaKeyPairPem();
    other_ = *RsaKey::FromPem(other_priv);
    jwks_ = JwksOf({{"k1", key_}});
  }
  static std::string JwksOf(std::vector<std::pair<std::string, RsaKey>> keys) {
    json::array out;
    for (auto& [kid, k] : keys) out.push_back(*ToJwk(k, kid));
    return json::serialize(json::object{{"keys", out}});
  }
  std::unique_ptr<OidcVerifier> Verifier(std::vector<OidcIssuer> issuers = {}) {
    if (issuers.empty()) issuers.push_back(OidcIssuer{kIssuer, "relay", kJwksUrl, "", "repository", {}, {}});
    auto v = OidcVerifier::New(std::move(issuers), OidcOptions{}, &clock_,
                               [this](const std::string& url, std::chrono::milliseconds) -> absl::StatusOr<std::string> {
                                 ++fetches_;
                                 if (url != kJwksUrl) return absl::NotFoundError("no such JWKS");
                                 return jwks_;
                               });
    EXPECT_TRUE(v.ok()) << v.status();
    return std::move(*v);
  }
  json::object Claims() {
    int64_t now = clock_.UnixMillis() / 1000;
    return {{"iss", kIssuer},       {"aud", "relay"},           {"sub", "repo:acme/npu:ref:refs/heads/main"},
            {"repository", "acme/npu"}, {"repository_id", "4242"}, {"jti", "jti-1"},
            {"iat", now},           {"nbf", now},               {"exp", now + 300}};
  }
  std::string Mint(const json::object& claims, const RsaKey& key, const std::string& kid = "k1") {
    return *SignRs256(claims, key, kid);
  }
  static std::string B64(std::string_view s) { return absl::WebSafeBase64Escape(absl::string_view(s.data(), s.size())); }

  FakeClock clock_;
  RsaKey key_, other_;
  std::string public_pem_;
  std::string jwks_;
  int fetches_ = 0;
};

TEST_F(OidcTest, AcceptsAGitHubActionsToken) {
  auto v = Verifier();
  auto id = v->Verify(Mint(Claims(), key_));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->repository, "acme/npu");
  EXPECT_EQ(id->repository_id, "4242");
  EXPECT_EQ(id->jti, "jti-1");
  EXPECT_EQ(id->issuer, kIssuer);
  EXPECT_EQ(fetches_, 1);
  ASSERT_TRUE(v->Verify(Mint(Claims(), key_)).ok());
  EXPECT_EQ(fetches_, 1) << "the JWKS is cached";
  // An audience array containing ours is fine.
  auto claims = Claims();
  claims["aud"] = json::array{"other", "relay"};
  EXPECT_TRUE(v->Verify(Mint(claims, key_)).ok());
}

TEST_F(OidcTest, RefusesEveryForgery) {
  auto v = Verifier();
  auto refused = [&](const std::string& token, const std::string& why) {
    auto id = v->Verify(token);
    EXPECT_FALSE(id.ok()) << why;
    if (!id.ok()) {
      EXPECT_EQ(id.status().code(), absl::StatusCode::kUnauthenticated) << why;
      EXPECT_THAT(id.status().message(), HasSubstr(why));
    }
  };
  refused(Mint(Claims(), other_), "signature does not verify");  // wrong key, right kid
  auto c = Claims();
  c["aud"] = "someone-else";
  refused(Mint(c, key_), "audience");
  c = Claims();
  c["iss"] = "https://evil.example.com";
  refused(Mint(c, key_), "issuer is not trusted");
  c = Claims();
  c["exp"] = clock_.UnixMillis() / 1000 - 120;  // past the minute of skew
  refused(Mint(c, key_), "expired");
  c = Claims();
  c["nbf"] = clock_.UnixMillis() / 1000 + 600;
  refused(Mint(c, key_), "not valid yet");
  c = Claims();
  c["iat"] = clock_.UnixMillis() / 1000 + 600;
  refused(Mint(c, key_), "issued in the future");
  c = Claims();
  c.erase("exp");
  refused(Mint(c, key_), "no exp");
  c = Claims();
  c.erase("repository");
  refused(Mint(c, key_), "names no known repository");

  // alg none: header and claims, empty signature.
  std::string payload = B64(json::serialize(Claims()));
  refused(B64(R"({"alg":"none","typ":"JWT","kid":"k1"})") + "." + payload + ".", "alg must be RS256");
  // HS256 keyed with the public key (algorithm confusion).
  std::string input = B64(R"({"alg":"HS256","typ":"JWT","kid":"k1"})") + "." + payload;
  unsigned char mac[32];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), public_pem_.data(), static_cast<int>(public_pem_.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &mac_len);
  refused(input + "." + B64(std::string_view(reinterpret_cast<char*>(mac), mac_len)), "alg must be RS256");
  // A claims part altered after signing.
  std::string good = Mint(Claims(), key_);
  auto altered = Claims();
  altered["repository"] = "acme/other";
  size_t first = good.find('.'), second = good.find('.', first + 1);
  refused(good.substr(0, first + 1) + B64(json::serialize(altered)) + good.substr(second), "signature does not verify");
  refused("not-a-token", "not a JWT");
}

TEST_F(OidcTest, AnUnknownKidRefetchesAtMostOncePerInterval) {
  auto v = Verifier();
  ASSERT_TRUE(v->Verify(Mint(Claims(), key_)).ok());
  ASSERT_EQ(fetches_, 1);
  // A key nobody published: one refetch, then none for a minute.
  for (int i = 0; i < 50; ++i) {
    auto id = v->Verify(Mint(Claims(), other_, "k-unknown"));
    ASSERT_FALSE(id.ok());
    EXPECT_THAT(id.status().message(), HasSubstr("key id"));
  }
  EXPECT_EQ(fetches_, 1) << "the first fetch was just now: still within the interval";
  clock_.Advance(61s);
  // The provider rotated: the new key is published; a token with it makes
  // the one refetch that finds it.
  jwks_ = JwksOf({{"k1", key_}, {"k2", other_}});
  auto id = v->Verify(Mint(Claims(), other_, "k2"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(fetches_, 2);
  for (int i = 0; i < 20; ++i) (void)v->Verify(Mint(Claims(), other_, "k3"));
  EXPECT_EQ(fetches_, 2);
  EXPECT_EQ(v->refreshes(), 2);
}

TEST_F(OidcTest, AnOldJwksIsRefreshedByThePeriodicTaskNotByRequests) {
  auto v = Verifier();
  ASSERT_TRUE(v->Verify(Mint(Claims(), key_)).ok());
  ASSERT_EQ(fetches_, 1);
  clock_.Advance(2h);  // past jwks_max_age
  ASSERT_TRUE(v->Verify(Mint(Claims(), key_)).ok()) << "the old keys still verify";
  EXPECT_EQ(fetches_, 1) << "a request never waits for a routine refresh";
  ASSERT_TRUE(v->RefreshStale().ok());
  EXPECT_EQ(fetches_, 2);
  ASSERT_TRUE(v->RefreshStale().ok());
  EXPECT_EQ(fetches_, 2) << "fresh again: nothing to do";
}

TEST_F(OidcTest, BuildkitePipelinesMapToRepositoriesWithRequiredClaims) {
  std::string dir = ::testing::TempDir();
  std::string jwks_file = dir + "/buildkite-jwks.json";
  std::ofstream(jwks_file) << JwksOf({{"bk", key_}});
  std::string providers = dir + "/providers.yaml";
  std::ofstream(providers) << "providers:\n"
                              "  - issuer: https://agent.buildkite.com\n"
                              "    audience: relay\n"
                              "    jwks_file: " << jwks_file << "\n"
                              "    repository_claim: pipeline_slug\n"
                              "    repositories: {npu-ci: acme/npu}\n"
                              "    required_claims: {organization_slug: acme}\n";
  auto issuers = LoadOidcProviders(providers);
  ASSERT_TRUE(issuers.ok()) << issuers.status();
  auto v = Verifier(*issuers);
  int64_t now = clock_.UnixMillis() / 1000;
  json::object c{{"iss", "https://agent.buildkite.com"}, {"aud", "relay"}, {"organization_slug", "acme"},
                 {"pipeline_slug", "npu-ci"}, {"iat", now}, {"exp", now + 300}};
  auto id = v->Verify(Mint(c, key_, "bk"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->repository, "acme/npu");
  c["organization_slug"] = "mallory";
  EXPECT_THAT(v->Verify(Mint(c, key_, "bk")).status().message(), HasSubstr("organization_slug"));
  c["organization_slug"] = "acme";
  c["pipeline_slug"] = "unmapped";
  EXPECT_THAT(v->Verify(Mint(c, key_, "bk")).status().message(), HasSubstr("no known repository"));
}

TEST_F(OidcTest, BadConfigurationIsRefusedAtStart) {
  EXPECT_FALSE(OidcVerifier::New({}, {}, &clock_).ok());
  EXPECT_FALSE(OidcVerifier::New({OidcIssuer{kIssuer, "", kJwksUrl, "", "repository", {}, {}}}, {}, &clock_).ok());
  EXPECT_FALSE(OidcVerifier::New({OidcIssuer{kIssuer, "relay", "", "", "repository", {}, {}}}, {}, &clock_).ok());
  OidcIssuer twice{kIssuer, "relay", kJwksUrl, "", "repository", {}, {}};
  EXPECT_FALSE(OidcVerifier::New({twice, twice}, {}, &clock_).ok());
  EXPECT_FALSE(ParseJwks(R"({"keys":[]})").ok());
  EXPECT_FALSE(ParseJwks("nope").ok());
}

}  // namespace
}  // namespace relay::auth
