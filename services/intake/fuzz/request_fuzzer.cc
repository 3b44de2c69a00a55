// libFuzzer target over intake's request handling path: raw bytes ->
// Beast's HTTP request parser (with intake's limits) -> WebhookHandler
// validation (signature, headers, JSON, record building) -> dedup.
//
// An HMAC cannot be guessed, so the first input byte selects a mode: odd
// means "re-sign the body with the fuzz secret", which lets the fuzzer reach
// the JSON parsing and record building behind the signature check.
//   tools/dev fuzz [SECONDS]
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "relay/base/digest.h"
#include "relay/base/log.h"
#include "relay/github/webhook_signature.h"
#include "relay/kafka/testing/fake_producer.h"
#include "relay/v1/webhook.pb.h"
#include "relay/intake/delivery_dedup.h"
#include "relay/intake/webhook_handler.h"

namespace {

constexpr char kSecret[] = "fuzz-secret-0123456789";

struct Harness {
  relay::FakeClock clock;
  prometheus::Registry registry;
  relay::kafka::testing::FakeProducer producer;
  relay::intake::DeliveryDedup dedup{&clock, std::chrono::minutes(1), 1000};
  relay::intake::WebhookHandler handler{{{kSecret}, "github.webhooks", "fuzz"}, &producer, &dedup, &clock, &registry};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* h = [] {
    relay::log::SetLevel(relay::log::Level::kError);  // rejections log at info
    return new Harness();  // shared across runs, as in the service
  }();
  if (size < 1) return 0;
  bool resign = data[0] & 1;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);

  namespace bhttp = boost::beast::http;
  bhttp::request_parser<bhttp::string_body> parser;
  parser.eager(true);
  parser.body_limit(1 << 20);
  parser.header_limit(64 * 1024);
  boost::beast::error_code ec;
  size_t used = 0;
  while (used < input.size() && !parser.is_done()) {
    size_t n = parser.put(boost::asio::buffer(input.data() + used, input.size() - used), ec);
    if (ec == bhttp::error::need_more) break;
    if (ec) return 0;
    if (n == 0) break;
    used += n;
  }
  if (!parser.is_done()) {
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return 0;
  }
  auto request = parser.release();
  if (resign) request.set("X-Hub-Signature-256", relay::github::SignWebhook(kSecret, request.body()));

  std::string original_body = request.body();
  auto v = h->handler.Validate(request);
  if (v.ok) {
    // The record must round-trip and keep the body byte for byte.
    relay::v1::WebhookRecord record;
    if (!record.ParseFromString(v.record.value) || record.body() != original_body) __builtin_trap();
    auto digest = relay::Sha256(original_body);
    if (record.body_sha256() != std::string(digest.begin(), digest.end())) __builtin_trap();
    auto claim = h->dedup.Begin(v.delivery_id, v.digest, [](bool) {});
    if (claim == relay::intake::DeliveryDedup::Claim::kNew ||
        claim == relay::intake::DeliveryDedup::Claim::kConflict) {
      h->dedup.Finish(v.delivery_id, v.digest, data[0] & 2);
    }
  } else if (v.error.result_int() < 400 || v.error.result_int() >= 500) {
    __builtin_trap();  // a rejection is always a 4xx
  }
  return 0;
}
