// relay-collector-path-bench: Google Benchmark over the CPU-bound pieces of
// the collector's two paths, as docs/benchmarks.md accounts for them.
//
//   build/release/tools/relay-collector-path-bench
//
// - BM_OidcVerify: one RS256 OIDC token verified against a JWKS file
//   (signature, iss, aud, times, repository claim).
// - BM_CallbackChecks: everything a callback costs before Kafka: the OIDC
//   verify, the body parsed and validated, the relay token verified, the
//   body digest.
// - BM_JUnitParse: test cases per second through the streaming JUnit parser
//   alone, fed in 64 KiB pieces as the HTTP server hands them over.
// - BM_JUnitToRecords: the same plus what an upload does with each case
//   before Kafka (the batch protobufs, serialized as the spool holds them).
#include <benchmark/benchmark.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <boost/json.hpp>

#include "relay/auth/jwt.h"
#include "relay/auth/oidc.h"
#include "relay/auth/relay_token.h"
#include "relay/base/clock.h"
#include "relay/collector/callback.h"
#include "relay/collector/junit.h"
#include "relay/v1/collector.pb.h"

namespace {

namespace json = boost::json;
constexpr char kIssuer[] = "https://oidc.bench.test";
constexpr char kTokenKeys[] = "signing_key: b\nkeys:\n  b: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n";

struct Fixture {
  relay::SystemClock clock;
  relay::auth::RsaKey key;
  std::unique_ptr<relay::auth::OidcVerifier> verifier;
  relay::auth::RelayTokenKeys keys = *relay::auth::RelayTokenKeys::Parse(kTokenKeys, "bench");
  std::string token, body;

  Fixture() {
    EVP_PKEY* pkey = EVP_RSA_gen(2048);
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(bio, pkey, nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    key = *relay::auth::RsaKey::FromPem(std::string_view(data, static_cast<size_t>(n)));
    BIO_free(bio);
    EVP_PKEY_free(pkey);
    std::string jwks_path = "/tmp/relay-collector-path-bench-jwks.json";
    std::ofstream(jwks_path) << json::serialize(json::object{{"keys", json::array{*relay::auth::ToJwk(key, "b1")}}});
    relay::auth::OidcIssuer issuer;
    issuer.issuer = kIssuer;
    issuer.audience = "relay-bench";
    issuer.jwks_file = jwks_path;
    verifier = std::move(*relay::auth::OidcVerifier::New({issuer}, {}, &clock));
    int64_t now = clock.UnixMillis() / 1000;
    token = *relay::auth::SignRs256(json::object{{"iss", kIssuer}, {"aud", "relay-bench"}, {"repository", "org/be"},
                                                 {"repository_id", "1"}, {"jti", "j"}, {"iat", now}, {"nbf", now},
                                                 {"exp", now + 3600}},
                                    key, "b1");
    json::object payload{{"action", "synchronize"}, {"number", 42},
                         {"repository", json::object{{"full_name", "pytorch/pytorch"}}},
                         {"pull_request", json::object{{"number", 42}, {"head", json::object{{"sha", "abc"}}}}}};
    body = json::serialize(json::object{
        {"event_type", "pull_request"}, {"delivery_id", "d1"}, {"payload", payload},
        {"relay_token", keys.Sign("d1", "org/be", now, 3600)},
        {"workflow", json::object{{"schema_version", "1"}, {"status", "completed"}, {"conclusion", "success"},
                                  {"name", "CI"}, {"url", "https://github.com/org/be/actions/runs/7"},
                                  {"run_id", "7"}, {"run_attempt", "1"}, {"job_name", "test (1, 3)"},
                                  {"check_run_id", "7-1"}, {"started_at", "2026-11-23T10:00:00Z"},
                                  {"completed_at", "2026-11-23T10:30:00Z"},
                                  {"test_results", json::object{{"passed", 950}, {"failed", 2}, {"skipped", 48}}}}}});
  }
};

Fixture& F() {
  static Fixture* f = new Fixture();
  return *f;
}

void BM_OidcVerify(benchmark::State& state) {
  Fixture& f = F();
  for (auto _ : state) benchmark::DoNotOptimize(f.verifier->Verify(f.token));
}
BENCHMARK(BM_OidcVerify);

void BM_CallbackChecks(benchmark::State& state) {
  Fixture& f = F();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  int64_t now = f.clock.UnixMillis() / 1000;
  for (auto _ : state) {
    auto id = f.verifier->Verify(f.token);
    auto parsed = relay::collector::ParseCallback(f.body);
    auto claims = f.keys.Verify(parsed->relay_token, now);
    EVP_Digest(f.body.data(), f.body.size(), digest, &len, EVP_sha256(), nullptr);
    benchmark::DoNotOptimize(id);
    benchmark::DoNotOptimize(claims);
  }
  state.counters["body_bytes"] = static_cast<double>(f.body.size());
}
BENCHMARK(BM_CallbackChecks);

std::string Report(int n) {
  std::string x = R"(<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">)";
  for (int i = 0; i < n; ++i) {
    x += R"(<testcase classname="test.test_ops.TestCommon" name="test_op_)" + std::to_string(i) +
         R"(" file="test/test_ops.py" time="0.0)" + std::to_string(i % 10) + "\"";
    x += i % 50 == 1 ? R"(><failure message="AssertionError: mismatch">trace</failure></testcase>)" : "/>";
  }
  return x + "</testsuite></testsuites>";
}

constexpr int kCases = 200'000;

template <bool kRecords>
void JUnit(benchmark::State& state) {
  static const std::string report = Report(kCases);
  for (auto _ : state) {
    relay::v1::TestReportBatch batch;
    size_t spooled = 0;
    auto parser = relay::collector::NewJUnitParser({}, [&](relay::collector::TestCase&& tc) {
      if constexpr (kRecords) {
        auto* c = batch.add_cases();
        c->set_file(std::move(tc.file));
        c->set_classname(std::move(tc.classname));
        c->set_name(std::move(tc.name));
        c->set_duration_s(tc.duration_s);
        c->set_outcome(std::string(relay::collector::OutcomeName(tc.outcome)));
        c->set_reruns(tc.reruns);
        c->set_message(std::move(tc.message));
        if (batch.cases_size() == 2000) {
          spooled += batch.SerializeAsString().size();
          batch.Clear();
        }
      } else {
        benchmark::DoNotOptimize(tc);
      }
      return absl::OkStatus();
    });
    for (size_t at = 0; at < report.size(); at += 64 * 1024) {
      if (!parser->Feed(std::string_view(report).substr(at, 64 * 1024)).ok()) state.SkipWithError("parse failed");
    }
    if (!parser->Finish().ok()) state.SkipWithError("parse failed");
    benchmark::DoNotOptimize(spooled);
  }
  state.SetItemsProcessed(state.iterations() * kCases);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(report.size()));
}
void BM_JUnitParse(benchmark::State& state) { JUnit<false>(state); }
void BM_JUnitToRecords(benchmark::State& state) { JUnit<true>(state); }
BENCHMARK(BM_JUnitParse)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_JUnitToRecords)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
