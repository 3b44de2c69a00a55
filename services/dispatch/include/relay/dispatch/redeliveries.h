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
// State lives on github.redeliveries (1 partition), read whole by each new
// owner: a `requested` record is acknowledged before a copy goes to the
// scheduler, a `started` record just before its POST. A guid with a
// `started` record is never asked for again within the window (at most one
// POST per guid, across copies, restarts and takeovers). A copy never goes
// out later than `request_deadline` after its Submit, so a guid recorded as
// requested that has no `started` record `request_deadline + unsent_margin`
// later (its instance was killed or stopped with it queued), or whose copy
// ended `unsent`, is asked for again by the next scan, with no operator
// action. A `checkpoint` record says where a complete listing stopped (the
// next lists back to there, or to the oldest guid still waiting for its
// POST); relayctl appends `scan` records to ask for a listing back to a
// time, kept until a listing over it completes (a failed page resumes from
// its cursor). The instance that owns that partition in the consumer group
// relay-dispatch-redeliveries is the one that scans.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
  // Pages one round lists (100 attempts each); a longer listing goes on in
  // further rounds, each deciding what it listed.
  int max_pages = 100;
  // A copy never starts later than this after its Submit (github.retry_deadline).
  std::chrono::milliseconds request_deadline{10 * 60'000};
  // Past request_deadline, how long a copy recorded but never started is
  // still waited for (clock skew between instances, a slow `started` write).
  std::chrono::milliseconds unsent_margin{5 * 60'000};
  // The wait before a failed round is tried again, from its cursor.
  std::chrono::milliseconds retry_after{30'000};
  std::string topic = "github.redeliveries";
  std::string webhooks_topic = "github.webhooks";
  std::string group_id = "relay-dispatch-redeliveries";
  std::string bootstrap;
  std::string client_id = "relay-dispatch";
  std::map<std::string, std::string> consumer_extra;  // raw librdkafka properties (session timeout: takeover time)
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
    // Called once if the consumer of github.redeliveries stops for good
    // before Stop (fatal client error, its dead-letter topic refusing):
    // the service's Runtime::Fatal, so /healthz fails and the process exits.
    std::function<void(const absl::Status&)> fatal;
  };
  Reconciler(RedeliveryOptions options, Parts parts, prometheus::Registry& metrics);
  ~Reconciler();
  absl::Status Start();
  void Stop();
  // Guids remembered as asked for: those within the window only. Any thread.
  size_t Remembered() const;

 private:
  struct Guid {  // one guid's attempts, as listed
    int64_t latest_id = 0;
    int64_t first_ms = INT64_MAX, first_ok_ms = INT64_MAX;
    bool ok = false;
    std::string event, action;
  };
  struct Asked {  // what github.redeliveries says of a guid
    int64_t requested_ms = 0, delivered_ms = 0;
    std::string request_id;  // the latest copy's
    bool started = false;    // a copy's POST went out, or may have: never again
    bool unsent = false;     // the latest copy ended before its POST
  };
  struct Copy {  // one GitHubRequest of a guid, in the scheduler
    std::string guid, id;
    std::chrono::steady_clock::time_point deadline;
    bool claimed = false, recorded = false;  // mu_; recorded: its `started` record acknowledged
  };
  struct Candidate {
    std::string guid, reason;
    Guid g;
  };
  struct Listing {  // one listing, over rounds and failed pages (scan thread)
    int64_t since_ms = 0;
    int64_t serves_end = 0;  // served_scan_end once complete
    std::string next_path;   // the next page; empty: the first
    int64_t newest_ms = 0, resume_from = INT64_MAX;
    bool reached = false;    // listed back to since_ms
    v1::RedeliveryCheckpoint counts;
  };
  int64_t RecordedFrom() const;  // the oldest github.webhooks record that matters
  void Apply(const v1::RedeliveryRecord& r, int64_t offset);
  void Prune(int64_t now_ms);  // mu_ held
  absl::Status Load();
  void Loop();
  Listing NewListing(int64_t now_ms);  // mu_ held
  // One round: up to max_pages pages from the listing's cursor, what they
  // list decided. True once the listing reached its since.
  absl::StatusOr<bool> Round(Listing& listing);
  absl::Status Decide(Listing& listing, const std::map<std::string, Guid>& guids);
  absl::Status Request(const Candidate& c);
  absl::Status Complete(Listing& listing);
  bool MayGo(const Copy& copy) const;  // mu_ held
  absl::Status Starting(Copy& copy);
  void Answer(Copy& copy, const JobResult& result);
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
  std::map<int64_t, int64_t> asks_;           // scan requests not yet served: offset -> since
  int64_t served_end_ = 0;                    // the checkpoints' served_scan_end
  std::map<std::string, Asked> asked_;        // guid -> its state; within the window
  std::map<std::string, int64_t> recorded_;   // guids in github.webhooks -> record time
  int64_t resume_from_ms_ = 0;                // the last checkpoint's
  std::optional<Listing> listing_;            // scan thread only

  prometheus::Family<prometheus::Counter>& scans_;
  prometheus::Counter& listed_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& results_;
  prometheus::Counter& requested_before_;
  prometheus::Counter& asked_again_;
  prometheus::Gauge& remembered_;
  prometheus::Gauge& owner_gauge_;
  prometheus::Gauge& last_scan_;
  prometheus::Gauge& checkpoint_;
};

}  // namespace relay::dispatch
