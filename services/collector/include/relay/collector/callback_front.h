// The receiving side of relay-collector: every instance runs one, on the
// HTTP and gRPC threads.
//
// A callback is checked here (OIDC token, allowlist level, per-repository
// rate, relay token), made durable on ci.callbacks for the owner of its
// repository's partition (job_owner.h), and its caller held until the
// owner's decision comes back: directly when the owner is this instance,
// on collector.decisions when it is another. A test-report upload is
// checked on its header the same way and then streamed (test_reports.h).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>

#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "relay/allowlist/allowlist.h"
#include "relay/auth/oidc.h"
#include "relay/auth/relay_token.h"
#include "relay/base/clock.h"
#include "relay/collector/collector_service.h"
#include "relay/collector/test_reports.h"
#include "relay/http/router.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/record.h"
#include "relay/v1/collector.pb.h"

namespace relay::collector {

// Per-repo token buckets: a matrix may report all at once (the burst), a
// runaway workflow may not flood the relay (the rate). Any thread.
class RepoRateLimiter {
 public:
  RepoRateLimiter(double rate, double burst) : rate_(rate), burst_(burst) {}
  // 0 when allowed; otherwise the seconds to wait before a token is free.
  int Take(const std::string& repo, std::chrono::steady_clock::time_point now);

 private:
  struct Bucket {
    double tokens;
    std::chrono::steady_clock::time_point at;
  };
  const double rate_, burst_;
  std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;
};

class CallbackFront {
 public:
  // Everything is borrowed and must outlive the front.
  struct Parts {
    const CollectorSettings* settings;
    const Clock* clock;
    allowlist::AllowlistFile* allowlist;
    const auth::RelayTokenKeys* keys;
    auth::OidcVerifier* oidc;
    kafka::Producer* producer;
    ReportUploads* reports;
  };
  CallbackFront(Parts parts, prometheus::Registry& metrics);

  // POST /github/callback (and the gRPC API's equivalent): answers through
  // `responder`, at once when refused, else once the owner has decided.
  void HandleCallback(http::Request&& request, http::Responder responder);
  // POST /github/test-report, on its header: a refusal, or the stream that
  // takes the body.
  std::variant<http::Response, std::shared_ptr<http::BodyStream>> HandleReportHeader(const http::RequestHeader& h);

  // A record of collector.decisions (the follower's thread): answers its
  // caller if that caller waits here.
  void OnDecision(const kafka::ConsumedRecord& r);
  // Answers the caller waiting for `d`, if it still waits here.
  void Decided(const v1::CallbackDecision& d);
  bool IsWaiting(const std::string& request_id);
  // Answers 503 (retry-safe: the callback is durable) to callers whose
  // decision did not come within settings.decision_timeout. Periodic.
  void ExpireWaiters();
  // Answers 503 to every caller still waiting (shutdown).
  void Close();

 private:
  // Who is calling and what it may report, as its OIDC token and the
  // allowlist say.
  struct Caller {
    auth::OidcIdentity identity;
    allowlist::Entry entry;
    std::string bearer;
  };
  struct Waiter {
    http::Responder responder;
    std::chrono::steady_clock::time_point deadline;
  };

  // The caller, or the answer that ends the request (401, 403, 429, and
  // 200 "ignored" for L1).
  std::variant<http::Response, Caller> Authenticate(std::string_view authz);
  // The relay token binds a report to a dispatch of `delivery` to the
  // caller's repo. `self_report` (nightly/periodic) needs none.
  std::optional<http::Response> CheckRelayToken(const std::string& token, const Caller& caller,
                                                const std::string& delivery, bool self_report,
                                                auth::RelayTokenClaims* claims_out);
  http::Response Answer(int status, const std::string& outcome, const std::string& reason, std::string_view extra = "");
  http::Response Refuse(int status, const std::string& reason, const std::string& detail, const std::string& repo = "");
  http::Response Unavailable(const std::string& detail);
  void Finish(const std::string& id, http::Response response);

  const Parts p_;
  RepoRateLimiter limiter_;
  std::mutex waiters_mu_;
  std::unordered_map<std::string, Waiter> waiters_;  // request id -> the caller waiting for its decision
  prometheus::Family<prometheus::Counter>& callbacks_;
  prometheus::Family<prometheus::Counter>& tokens_refused_;
};

}  // namespace relay::collector
