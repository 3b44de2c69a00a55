// relay-intake-path-bench: Google Benchmark over the CPU-bound pieces of
// intake's request path that docs/benchmarks.md accounts for one by one.
//
//   build/release/tools/relay-intake-path-bench
//
// - BM_Sha256: raw SHA-256 of a webhook-sized body, the floor for
// - BM_WebhookVerify: X-Hub-Signature-256 verification as intake runs it
// - BM_DedupToCap: Begin+Finish of fresh ids into a dedup table at its
//   default cap (500k), from empty to 100k past the cap (evicting one per
//   insert there, as at saturation). The counter worst_begin_us is the
//   slowest Begin: a growth rehash under the lock shows there (59 ms at
//   458k ids before the table was sized for its cap).
#include <benchmark/benchmark.h>
#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "relay/intake/delivery_dedup.h"
#include "relay/base/clock.h"
#include "relay/github/webhook_signature.h"

namespace {

// The @octokit/webhooks-examples corpus averages 9.9 KB per payload.
constexpr size_t kBodyBytes = 10'000;
constexpr char kSecret[] = "relay-bench-webhook-secret-01";

std::string Body() {
  std::string body = "{\"items\":[";
  while (body.size() < kBodyBytes) body += R"({"action":"opened","number":1,"url":"https://api.github.com/x"},)";
  body.back() = ']';
  return body + "}";
}

void BM_Sha256(benchmark::State& state) {
  const std::string body = Body();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  for (auto _ : state) {
    EVP_Digest(body.data(), body.size(), digest, &len, EVP_sha256(), nullptr);
    benchmark::DoNotOptimize(digest);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_Sha256);

void BM_WebhookVerify(benchmark::State& state) {
  const std::string body = Body();
  const std::string signature = relay::github::SignWebhook(kSecret, body);
  relay::github::WebhookVerifier verifier({kSecret});
  for (auto _ : state) benchmark::DoNotOptimize(verifier.Verify(signature, body));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_WebhookVerify);

void BM_DedupToCap(benchmark::State& state) {
  constexpr size_t kCap = 500'000;  // intake.dedup_max_entries' default
  relay::SystemClock clock;
  relay::intake::DeliveryDedup dedup(&clock, std::chrono::hours(1), kCap);
  size_t next = 0;
  double worst_us = 0;
  for (auto _ : state) {
    std::string id = "3f8e1c2a-" + std::to_string(next++) + "-11ef-9d1b-0242ac120002";
    auto start = std::chrono::steady_clock::now();
    relay::intake::BodyDigest digest{};
    std::copy_n(id.begin(), std::min(id.size(), digest.size()), digest.begin());
    dedup.Begin(id, digest, [](bool) {});
    auto took = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start);
    worst_us = std::max(worst_us, took.count());
    dedup.Finish(id, digest, true);
  }
  state.counters["worst_begin_us"] = worst_us;
}
BENCHMARK(BM_DedupToCap)->Iterations(600'000);

}  // namespace

BENCHMARK_MAIN();
