// relay-stats' CI HUD (pages.h) on the service's HTTP server: the pages
// under /hud and their assets under /hud/static (compiled in, see
// services/stats/hud/). A page blocks on ClickHouse for tens of
// milliseconds, so pages run on threads of their own, never on the
// server's event loops (which also answer /readyz and /metrics), each with
// a ClickHouse client of its own. Read-only: GET only, nothing it serves
// changes state.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include <boost/asio/thread_pool.hpp>

#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "relay/clickhouse/client.h"
#include "relay/http/router.h"
#include "relay/stats/hud/pages.h"

namespace relay::stats::hud {

struct HudOptions {
  clickhouse::ClientOptions clickhouse;
  int threads = 4;                  // pages rendered at once
  int max_queued = 64;              // pages waiting for a thread; more are answered 503
  std::chrono::milliseconds tier_report_interval{30'000};  // the tier report is recomputed this often
};

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
  void Serve(const PageRoute& page, http::Request&& request, http::Responder responder);
  http::Response Render(const PageRoute& page, const http::Request& request);
  std::unique_ptr<clickhouse::Client> Acquire();
  void Release(std::unique_ptr<clickhouse::Client> client);

  HudOptions options_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& seconds_;
  std::atomic<int> waiting_{0};
  std::atomic<bool> stopping_{false};
  std::mutex clients_mu_;
  std::vector<std::unique_ptr<clickhouse::Client>> clients_;
  TierCache tiers_;
  boost::asio::thread_pool pool_;
};

// The Content-Security-Policy every page is sent with: scripts, styles
// and images from /hud/static only, nothing inline, no framing.
extern const char kContentSecurityPolicy[];

}  // namespace relay::stats::hud
