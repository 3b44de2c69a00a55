// The GitHub App client against the fake GitHub (in process): the app JWT,
// installation tokens cached and refreshed, GitHub's rules for dispatches,
// rate-limit headers, and a 401 answered by one token refresh.
#include "relay/github/api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/fixtures.h"
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <boost/json.hpp>

#include "fake_github.h"

namespace relay::github {
namespace {

namespace bhttp = boost::beast::http;
using ::testing::HasSubstr;


class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto [priv, pub] = relay::testing::NewRsaKeyPairPem();
    fake_github::Options fo;
    fo.app_id = "4242";
    fo.public_key_pem = pub;
    auto fake = fake_github::FakeGitHub::Start(fo);
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(*fake);
    auto key = auth::RsaKey::FromPem(priv);
    ASSERT_TRUE(key.ok());
    credentials_ = std::make_unique<AppCredentials>("4242", *key, &clock_);
    api_ = std::make_unique<Api>(NewClient(), credentials_.get());
  }
  std::unique_ptr<http::Client> NewClient() {
    return std::move(*http::Client::New("http://127.0.0.1:" + std::to_string(fake_->port())));
  }
  boost::json::value Control(bhttp::verb m, const std::string& path, const std::string& body = "") {
    auto r = NewClient()->Send(m, path, {{"Content-Type", "application/json"}}, body);
    EXPECT_TRUE(r.ok());
    return boost::json::parse(r->body);
  }
  ApiCall Dispatch(const std::string& repo, const std::string& body) {
    return ApiCall{bhttp::verb::post, "/repos/" + repo + "/dispatches", body, repo, {}};
  }

  SystemClock clock_;
  std::unique_ptr<fake_github::FakeGitHub> fake_;
  std::unique_ptr<AppCredentials> credentials_;
  std::unique_ptr<Api> api_;
};

TEST_F(ApiTest, DispatchesWithAnInstallationTokenThatIsCached) {
  for (int i = 0; i < 3; ++i) {
    auto r = api_->Call(Dispatch("acme/one", R"({"event_type":"pull_request","client_payload":{"a":1}})"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 204u);
    EXPECT_GT(r->installation_id, 0);
    EXPECT_EQ(r->headers["x-ratelimit-remaining"], std::to_string(5000 - 1 - i));
  }
  EXPECT_EQ(credentials_->token_fetches(), 1);
  auto stats = Control(bhttp::verb::get, "/_fake/stats");
  EXPECT_EQ(stats.at("dispatches").as_int64(), 3);
}

TEST_F(ApiTest, GitHubsDispatchRulesAreEnforced) {
  std::string eleven = R"({"event_type":"x","client_payload":{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"k":1}})";
  EXPECT_EQ(api_->Call(Dispatch("acme/one", eleven))->status, 422u);
  EXPECT_EQ(api_->Call(Dispatch("acme/one", R"({"event_type":""})"))->status, 422u);
  std::string big = R"({"event_type":"x","client_payload":{"p":")" + std::string(70'000, 'x') + "\"}}";
  auto r = api_->Call(Dispatch("acme/one", big));
  EXPECT_EQ(r->status, 422u);
  EXPECT_THAT(r->body, HasSubstr("64 KB"));
}

TEST_F(ApiTest, ARevokedTokenIsRefreshedOnceAndANotInstalledRepoIsNotFound) {
  ASSERT_EQ(api_->Call(Dispatch("acme/one", R"({"event_type":"x"})"))->status, 204u);
  // The fake forgets its tokens (as GitHub does when one is revoked): the
  // next call gets 401 and asks for a retry; the retry fetches a new token
  // and succeeds.
  Control(bhttp::verb::post, "/_fake/reset");
  auto r = api_->Call(Dispatch("acme/one", R"({"event_type":"x"})"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 401u);
  EXPECT_TRUE(r->retry);
  r = api_->Call(Dispatch("acme/one", R"({"event_type":"x"})"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 204u);
  EXPECT_EQ(credentials_->token_fetches(), 2);
  Control(bhttp::verb::post, "/_fake/config", R"({"not_installed":["ghost/repo"]})");
  auto ghost = api_->Call(Dispatch("ghost/repo", R"({"event_type":"x"})"));
  EXPECT_TRUE(IsNotInstalled(ghost.status())) << ghost.status();
  EXPECT_THAT(std::string(ghost.status().message()), HasSubstr("app not installed"));
}

// The App's own lookups are rate limited too: a 403 of a limit there is
// Unavailable (the write waits and tries again), not the permission error
// that ends it for good; a plain 403 still is one.
TEST_F(ApiTest, ARateLimitedInstallationLookupIsUnavailableNotPermissionDenied) {
  Control(bhttp::verb::post, "/_fake/faults",
          R"({"path":"^/repos/acme/limited/installation$","status":403,"count":1,"retry_after":60,)"
          R"("message":"You have exceeded a secondary rate limit"})");
  auto limited = api_->Call(Dispatch("acme/limited", R"({"event_type":"x"})"));
  EXPECT_TRUE(absl::IsUnavailable(limited.status())) << limited.status();
  Control(bhttp::verb::post, "/_fake/faults",
          R"({"path":"^/repos/acme/denied/installation$","status":403,"count":1,"message":"Resource not accessible"})");
  auto denied = api_->Call(Dispatch("acme/denied", R"({"event_type":"x"})"));
  EXPECT_TRUE(absl::IsPermissionDenied(denied.status())) << denied.status();
}

// An organisation uninstalls and reinstalls the App: the same repositories
// under a new installation id. The cached token is refused (401), its
// exchange answers 404, the installation is looked up again, and the call
// goes through on the retry. A repository the App was removed from is
// NotFound as "app not installed", not a retry loop.
TEST_F(ApiTest, AReinstalledAppIsFoundAgainAndAnUninstalledRepoIsNotInstalled) {
  ASSERT_EQ(api_->Call(Dispatch("acme/one", R"({"event_type":"x"})"))->status, 204u);
  ASSERT_EQ(api_->Call(Dispatch("acme/two", R"({"event_type":"x"})"))->status, 204u);
  int64_t before = *api_->Installation("acme/one");
  Control(bhttp::verb::post, "/_fake/config", R"({"reinstall":true,"not_installed":["acme/two"]})");
  auto r = api_->Call(Dispatch("acme/one", R"({"event_type":"x"})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 401u);
  EXPECT_TRUE(r->retry);
  r = api_->Call(Dispatch("acme/one", R"({"event_type":"x"})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 204u);
  EXPECT_NE(r->installation_id, before);
  EXPECT_EQ(*api_->Installation("acme/one"), r->installation_id);
  // acme/two still has the old installation cached: 401, then the lookup
  // finds it is not installed at all.
  auto two = api_->Call(Dispatch("acme/two", R"({"event_type":"x"})"));
  if (two.ok()) {
    EXPECT_TRUE(two->retry);
    two = api_->Call(Dispatch("acme/two", R"({"event_type":"x"})"));
  }
  EXPECT_TRUE(IsNotInstalled(two.status())) << two.status();
  auto stats = Control(bhttp::verb::get, "/_fake/stats");
  EXPECT_LE(stats.at("unauthorized").as_int64(), 2);
}

// Fresh credentials of a freshly looked-up installation refused: the
// installation is backed off, and calls for it wait without reaching GitHub.
TEST_F(ApiTest, AnInstallationThatKeepsAnswering401IsBackedOff) {
  ASSERT_EQ(api_->Call(Dispatch("acme/one", R"({"event_type":"x"})"))->status, 204u);
  Control(bhttp::verb::post, "/_fake/faults", R"({"path":"/repos/acme/one/dispatches","status":401,"count":-1})");
  int retries = 0;
  absl::StatusOr<ApiResult> r;
  for (int i = 0; i < 5; ++i) {
    r = api_->Call(Dispatch("acme/one", R"({"event_type":"x"})"));
    if (!r.ok() || !r->retry) break;
    ++retries;
  }
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 401u);
  EXPECT_FALSE(r->retry);
  EXPECT_EQ(retries, 2) << "a new token, then a new lookup, then the backoff";
  int64_t calls = Control(bhttp::verb::get, "/_fake/stats").at("calls").as_int64();
  auto held = api_->Call(Dispatch("acme/one", R"({"event_type":"x"})"));
  EXPECT_TRUE(absl::IsUnavailable(held.status())) << held.status();
  EXPECT_THAT(std::string(held.status().message()), HasSubstr("keeps answering 401"));
  EXPECT_EQ(Control(bhttp::verb::get, "/_fake/stats").at("calls").as_int64(), calls) << "no call while backed off";
}

TEST_F(ApiTest, AnAppJwtFromAnotherKeyIsRefused) {
  auto [other_priv, other_pub] = relay::testing::NewRsaKeyPairPem();
  AppCredentials stranger("4242", *auth::RsaKey::FromPem(other_priv), &clock_);
  Api api(NewClient(), &stranger);
  auto r = api.Call(Dispatch("acme/one", R"({"event_type":"x"})"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("401"));
}

TEST(IsoTimeTest, ParsesGitHubTimestamps) {
  EXPECT_EQ(ParseIsoTime("1970-01-01T00:01:00Z"), 60);
  EXPECT_EQ(ParseIsoTime("2026-11-23T12:00:00Z"), 1795435200);
  EXPECT_FALSE(ParseIsoTime("2026-11-23 12:00:00").has_value());
  EXPECT_FALSE(ParseIsoTime("2026-11-23T12:00:00Zjunk").has_value());
}

}  // namespace
}  // namespace relay::github
