// relay-dispatch's settings: every key it reads, with its default and
// bounds (deploy/config/dispatch.example.yaml lists them for operators).
#include <algorithm>

#include "relay/dispatch/dispatch_service.h"
#include "relay/http/client.h"

namespace relay::dispatch {

using namespace std::chrono_literals;

absl::StatusOr<DispatchSettings> LoadSettings(Config& config, const service::CommonSettings&) {
  DispatchSettings s;
  s.kafka = service::ReadProducerOptions(config, "relay-dispatch");
  s.group_id = config.String("kafka.group_id", "relay-dispatch");
  s.session_timeout = config.Duration("kafka.session_timeout", 45s, 6s, 5min);
  s.api_url = config.String("github.api_url", "https://api.github.com");
  s.app_id = config.RequiredString("github.app_id");
  s.private_key_file = config.RequiredString("github.private_key_file");
  s.ca_file = config.String("github.ca_file", "");
  s.request_timeout = config.Duration("github.request_timeout", 30s, 1s, 5min);
  s.budget.max_writes_per_minute = config.Int("github.max_writes_per_minute", 80, 1, 1'000'000);
  // The window of that ceiling is a minute; shorter only in tests that must
  // see it work without waiting minutes.
  s.budget.window = config.Duration("github.write_window", 60s, 100ms, 1h);
  s.budget.max_writes_per_hour = config.Int("github.max_writes_per_hour", 500, 1, 100'000'000);
  // What GitHub's secondary limits count over: the App (the conservative
  // reading of GitHub's documentation: services/dispatch/README.md) or each
  // installation.
  if (auto scope = ParseBudgetScope(config.String("github.budget_scope", "app")); scope.ok()) {
    s.budget.scope = *scope;
  } else {
    config.Fail("github.budget_scope", std::string(scope.status().message()));
  }
  s.topics.budget = config.String("github.budget_topic", s.topics.budget);
  s.budget_lease = config.Duration("github.budget_lease", 2s, 100ms, 1min);
  s.scheduler.concurrency = static_cast<int>(config.Int("github.max_concurrency", 8, 1, 256));
  // Threads taking writes. Past max_concurrency, the extra ones wait for
  // their STARTED mark's fenced transaction holding no connection, so the
  // connections stay busy (2,000 writes/s instead of 1,400 with 512 on 64:
  // docs/benchmarks.md, "Dispatch: workers apart from connections"); the
  // cost is more writes between their call and their DONE record, repeated
  // after a crash. The default keeps one per connection.
  s.scheduler.workers = static_cast<int>(
      config.Int("github.workers", s.scheduler.concurrency, s.scheduler.concurrency, 4096));
  s.scheduler.retry_deadline = config.Duration("github.retry_deadline", 10min, 1s, 24h);
  s.allowlist_file = config.RequiredString("allowlist.file");
  s.allowlist_reload = config.Duration("allowlist.reload_interval", 10s, 100ms, 1h);
  s.token_keys_file = config.RequiredString("tokens.keys_file");
  s.planner.token_ttl_seconds = config.Duration("tokens.ttl", 7 * 24h, 1min, 30 * 24h).count() / 1000;
  s.planner.upstream_repo = config.RequiredString("dispatch.upstream_repo");
  s.planner.app_id = s.app_id;
  s.batch_records = static_cast<size_t>(config.Int("dispatch.batch_records", 500, 1, 100'000));
  s.batch_linger = config.Duration("dispatch.batch_linger", 5ms, 0ms, 10s);
  s.batch_wait = config.Duration("dispatch.batch_wait", 5s, 100ms, 5min);
  s.max_poll_interval = config.Duration("kafka.max_poll_interval", 300s, 10s, 1h);
  s.revoke_wait = config.Duration("dispatch.revoke_wait", 10s, 100ms, 10min);
  if (s.revoke_wait * 10 > s.max_poll_interval) {
    config.Fail("dispatch.revoke_wait", "at most a tenth of kafka.max_poll_interval (" +
                                            std::to_string(s.max_poll_interval.count()) +
                                            " ms): the whole group waits for it in every rebalance");
  }
  if (s.batch_wait * 10 > s.max_poll_interval) {
    config.Fail("dispatch.batch_wait", "at most a tenth of kafka.max_poll_interval");
  }
  s.redeliveries.topic = config.String("dispatch.redeliveries_topic", s.redeliveries.topic);
  s.redeliveries.group_id = config.String("dispatch.redelivery_group_id", s.redeliveries.group_id);
  s.redeliveries.interval = config.Duration("dispatch.redelivery_interval", 10min, 0ms, 24h);
  // GitHub keeps deliveries for redelivery 3 days on github.com, 7 on GHES.
  s.redeliveries.window = config.Duration("dispatch.redelivery_window", 72h, 1min, 30 * 24h);
  s.redeliveries.grace = config.Duration("dispatch.redelivery_grace", 2min, 0ms, 1h);
  // A copy never goes out past the scheduler's deadline; one recorded but
  // not started this much later was dropped unsent, and is asked for again.
  s.redeliveries.request_deadline = s.scheduler.retry_deadline;
  s.redeliveries.unsent_margin = config.Duration("dispatch.redelivery_unsent_margin", 5min, 1s, 24h);
  s.redeliveries.max_per_scan = static_cast<int>(config.Int("dispatch.redelivery_max_per_scan", 1000, 1, 100'000));
  s.redeliveries.max_pages = static_cast<int>(config.Int("dispatch.redelivery_max_pages", 100, 1, 10'000));
  // A failed page is fetched again from its cursor this much later.
  s.redeliveries.retry_after =
      s.redeliveries.interval.count() > 0 ? std::min<std::chrono::milliseconds>(s.redeliveries.interval, 30s) : 30s;
  {
    // github.api_url's path (GHES: /api/v3) comes back in the Link URLs.
    auto scheme = s.api_url.find("://");
    auto slash = scheme == std::string::npos ? std::string::npos : s.api_url.find('/', scheme + 3);
    s.redeliveries.api_path_prefix = slash == std::string::npos ? "" : s.api_url.substr(slash);
    while (!s.redeliveries.api_path_prefix.empty() && s.redeliveries.api_path_prefix.back() == '/') {
      s.redeliveries.api_path_prefix.pop_back();
    }
  }
  http::ClientOptions probe;
  probe.ca_file = s.ca_file;
  if (auto b = http::Client::New(s.api_url, probe); !b.ok()) config.Fail("github.api_url", std::string(b.status().message()));
  return s;
}

}  // namespace relay::dispatch
