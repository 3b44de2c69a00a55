// relay-stats' CI HUD (pages.h) on the service's HTTP server: the pages
// under /hud and their assets under /hud/static (compiled in, see
// services/stats/hud/). A page blocks on ClickHouse for tens of
// milliseconds, so pages run on threads of their own, never on the
// server's event loops (which also answer /readyz and /metrics), each with
// a ClickHouse client of its own. Read-only: GET only, nothing it serves
// changes state, and it reads as a ClickHouse user that cannot write
// (checked on every client it makes: readonly must not be 0).
//
// What one reader, or a crowd, can make it cost:
// - an answer is reused for HudOptions::cache.ttl, and a page asked for
//   while it is being made waits for that answer (page_cache.h): those
//   take no thread and no query;
// - at most `threads` pages are made at once and `max_queued` wait; more
//   are answered 503;
// - a page's queries share one budget, HudOptions::timeout from the
//   request's arrival (below http.handler_timeout, so the page answers
//   before its request is given up on), each with the client's per-query
//   limits (rows, memory; ClientOptions::settings); a query past the
//   budget is killed on the server (clickhouse::QueryBounds), so none
//   outlives its request;
// - `days` is bounded (HudOptions::max_days).
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include <boost/asio/thread_pool.hpp>

#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "relay/clickhouse/client.h"
#include "relay/http/router.h"
#include "relay/base/clock.h"
#include "relay/stats/hud/page_cache.h"
#include "relay/stats/hud/pages.h"

namespace relay::stats::hud {

struct HudOptions {
  // The HUD's own (read-only) user, with its per-query limits in settings.
  clickhouse::ClientOptions clickhouse;
  int threads = 4;                  // pages rendered at once
  int max_queued = 64;              // pages waiting for a thread; more are answered 503
  std::chrono::milliseconds timeout{10'000};  // a page's whole budget, from its request's arrival
  PageCacheOptions cache;
  int max_days = 90;                // the longest window a page may be asked for
  std::chrono::milliseconds tier_report_interval{30'000};  // the tier report is recomputed this often
  std::vector<PageRoute> pages;     // empty: PageRoutes() (tests add pages of their own)
  const Clock* clock = nullptr;     // the cache's; the system clock when null
};

// A ClickHouse client for HUD pages: made from `options`, bound by
// `bounds`, and checked to be read-only (FailedPrecondition naming the
// user when its readonly setting is 0; the server's error when it cannot
// tell).
absl::StatusOr<std::unique_ptr<clickhouse::Client>> NewReadOnlyClient(const clickhouse::ClientOptions& options,
                                                                      clickhouse::QueryBounds bounds = {});

class HudServer {
 public:
  HudServer(HudOptions options, prometheus::Registry& metrics);
  ~HudServer();  // Stop(), then waits for the pages being rendered

  void AddRoutes(http::Router& router);
  // From now on pages still waiting for a thread are answered 503 at once
  // (relay-stats is draining); those being rendered finish.
  void Stop() { stopping_ = true; }
  // Recomputes the tier report the pages show (relay-stats calls it every
  // tier_report_interval from a periodic task, with a client of its own).
  void RefreshTierReport(clickhouse::Client& client);
  std::chrono::milliseconds tier_report_interval() const { return options_.tier_report_interval; }

 private:
  // A page to make, waiting for a thread.
  struct Job {
    const PageRoute* page;
    std::string key;
    Params params;
    std::chrono::steady_clock::time_point deadline;
    http::Responder responder;
  };
  void Serve(const PageRoute& page, http::Request&& request, http::Responder responder);
  // Runs on a pool thread: takes the pending job the most requests wait
  // for (the oldest of those), so a crowd's page is not stuck behind pages
  // one reader each asked for.
  void RunNext();
  // Removes the pending jobs past their deadline (to be answered 503).
  std::vector<Job> TakeExpired();
  // Makes the page on a thread of the pool; answers every request waiting for it.
  void Make(const PageRoute& page, std::string key, Params params, std::chrono::steady_clock::time_point deadline,
            http::Responder responder);
  http::Response Render(const PageRoute& page, Params params, std::chrono::steady_clock::time_point deadline);
  // A client of the pool (or a new one, checked read-only), bound by `bounds`.
  absl::StatusOr<std::unique_ptr<clickhouse::Client>> Acquire(clickhouse::QueryBounds bounds);
  void Release(std::unique_ptr<clickhouse::Client> client);

  HudOptions options_;
  SystemClock system_clock_;
  const Clock& clock_;
  PageCache cache_;
  std::atomic<uint64_t> renders_{0};  // query id prefixes: relay-hud-<process start>-<n>
  const std::string id_prefix_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& seconds_;
  prometheus::Family<prometheus::Counter>& cache_counter_;
  std::atomic<int> waiting_{0};
  std::atomic<bool> stopping_{false};
  std::mutex clients_mu_;
  std::vector<std::unique_ptr<clickhouse::Client>> clients_;
  TierCache tiers_;
  std::mutex pending_mu_;
  std::list<Job> pending_;  // oldest first; one pool task per job
  boost::asio::thread_pool pool_;
};

// The Content-Security-Policy every page is sent with: scripts, styles
// and images from /hud/static only, nothing inline, no framing.
extern const char kContentSecurityPolicy[];

}  // namespace relay::stats::hud
