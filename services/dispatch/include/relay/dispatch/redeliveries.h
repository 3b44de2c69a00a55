// The GitHub redelivery reconciler. GitHub never retries a failed webhook
// delivery by itself, and a delivery it counts as done may still never have
// reached github.webhooks (a proxy answered for intake). So, every
// `interval`, one dispatch instance lists the App's deliveries within
// GitHub's redelivery window (GET /app/hook/deliveries, app JWT, 100 a page,
// cursor pages through the Link header), groups the attempts by guid (the
// X-GitHub-Delivery intake records), and asks GitHub once to deliver again
// (POST /app/hook/deliveries/{id}/attempts) each guid that
//   - has no successful attempt ("failed"), or
//   - succeeded but is not in github.webhooks ("not_recorded"; only once the
//     success is older than `grace`, so intake had time to record it).
//
// The requests are GitHubRequests of their own kind (redelivery, level 0:
// after every other write) through dispatch's scheduler and its one budget.
// State lives on github.redeliveries (1 partition): a `requested` record is
// acknowledged before a request goes out, so a guid is never requested
// twice within the window, restarts and other instances included; a
// `checkpoint` record says where the listing stopped (the next scan lists
// back to there, not the whole window); relayctl appends `scan` records to
// ask for a scan now. The instance that owns that partition in the consumer
// group relay-dispatch-redeliveries is the one that scans.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "relay/base/clock.h"
#include "relay/dispatch/budget.h"
#include "relay/dispatch/scheduler.h"
#include "relay/github/api.h"
#include "relay/kafka/consumer.h"
#include "relay/kafka/follower.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/reader.h"
#include "relay/v1/github.pb.h"

namespace relay::dispatch {

struct RedeliveryOptions {
  std::chrono::milliseconds interval{600'000};   // 0: only scans relayctl asks for
  std::chrono::milliseconds window{72 * 3'600'000};  // GitHub's redelivery window: 3 days (GHES: 7)
  std::chrono::milliseconds grace{120'000};
  int max_per_scan = 1000;
  // A request with no answer after this was dropped before it went out (the
  // instance stopped with it queued): its guid may be asked for again.
  std::chrono::milliseconds unanswered_after{15 * 60'000};
  std::string topic = "github.redeliveries";
  std::string webhooks_topic = "github.webhooks";
  std::string group_id = "relay-dispatch-redeliveries";
  std::string bootstrap;
  std::string client_id = "relay-dispatch";
  std::string api_path_prefix;  // github.api_url's path (GHES: /api/v3): taken off the Link URLs
};

class Reconciler {
 public:
  using ClientFactory = std::function<std::unique_ptr<http::Client>()>;
  struct Parts {
    ClientFactory client;  // a connection to the GitHub API, for the listing
    github::AppCredentials* credentials;
    CallBudget* budget;
    Scheduler* scheduler;
    kafka::Producer* producer;
    kafka::FollowerFactory follower;
    std::function<absl::StatusOr<std::unique_ptr<kafka::TopicReader>>()> reader;
    std::function<absl::StatusOr<std::unique_ptr<kafka::Consumer>>(kafka::ConsumerOptions)> consumer;
    const Clock* clock;
  };
  Reconciler(RedeliveryOptions options, Parts parts, prometheus::Registry& metrics);
  ~Reconciler();
  absl::Status Start();
  void Stop();

 private:
  struct Guid {
    int64_t latest_id = 0;
    int64_t first_ms = INT64_MAX, first_ok_ms = INT64_MAX;
    bool ok = false;
    std::string event, action;
  };
  void Apply(const v1::RedeliveryRecord& r, int64_t log_ms);
  absl::Status Load();
  void Loop();
  absl::Status Scan(int64_t since_ms);
  absl::StatusOr<github::ApiResult> Get(github::Api& api, const std::string& path);
  absl::Status Append(const std::string& key, const v1::RedeliveryRecord& r);

  RedeliveryOptions options_;
  Parts parts_;
  std::unique_ptr<kafka::Follower> follower_;
  std::unique_ptr<kafka::Consumer> consumer_;
  std::thread consumer_thread_, scan_thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool owner_ = false;
  std::optional<int64_t> scan_asked_since_;        // a scan relayctl asked for
  std::map<std::string, int64_t> requested_;        // guid -> when requested
  std::set<std::string> answered_;                  // guids with a result record
  std::map<std::string, int64_t> recorded_;         // guids in github.webhooks -> record time
  int64_t resume_from_ms_ = 0;                      // the last checkpoint's
  int64_t last_scanned_ms_ = 0;                    // the last checkpoint's

  prometheus::Family<prometheus::Counter>& scans_;
  prometheus::Counter& listed_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& results_;
  prometheus::Counter& requested_before_;
  prometheus::Gauge& owner_gauge_;
  prometheus::Gauge& last_scan_;
  prometheus::Gauge& checkpoint_;
};

}  // namespace relay::dispatch
