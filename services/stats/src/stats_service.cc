#include "relay/stats/stats_service.h"

#include <atomic>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "relay/base/log.h"
#include "relay/base/secret_file.h"
#include "relay/allowlist/allowlist.h"
#include "relay/base/status.h"
#include "relay/service/group_consumer.h"
#include "relay/stats/ci_files.h"
#include "relay/stats/hud/hud_server.h"
#include "relay/stats/migrate.h"
#include "relay/stats/rollups.h"

namespace relay::stats {
namespace {

using namespace std::chrono_literals;

// What stats.hud_timeout leaves of http.handler_timeout: the kill of a
// query given up on.
constexpr std::chrono::milliseconds kHudKillMargin = clickhouse::kKillTimeout;

// The label ClickHouse errors are counted under: ClickHouse's own code, or
// what kind of failure it was when the server never answered.
std::string ErrorLabel(const absl::Status& s) {
  if (auto code = clickhouse::ServerErrorCode(s)) return std::to_string(*code);
  return absl::StatusCodeToString(s.code());
}

class StatsService final : public service::Service {
 public:
  static absl::StatusOr<std::unique_ptr<service::Service>> Start(StatsSettings s, service::Runtime& runtime) {
    return service::Wired(std::unique_ptr<StatsService>(new StatsService(std::move(s), runtime)), runtime);
  }

  ~StatsService() override { Stop(); }

  bool Drain(std::chrono::milliseconds budget) override {
    return service::StopThenFlush(budget, [this] { Stop(); }, *producer_);
  }

 private:
  StatsService(StatsSettings settings, service::Runtime& runtime)
      : settings_(std::move(settings)),
        clock_(&runtime.clock()),
        inserted_(prometheus::BuildCounter()
                      .Name("relay_stats_rows_inserted_total")
                      .Help("Rows ClickHouse acknowledged, by table")
                      .Register(runtime.metrics())),
        insert_seconds_(prometheus::BuildHistogram()
                            .Name("relay_stats_insert_seconds")
                            .Help("Time of one insert (one table, one batch), by table")
                            .Register(runtime.metrics())),
        insert_rows_(prometheus::BuildHistogram()
                         .Name("relay_stats_insert_rows")
                         .Help("Rows per insert, by table")
                         .Register(runtime.metrics())),
        errors_(prometheus::BuildCounter()
                    .Name("relay_stats_clickhouse_errors_total")
                    .Help("Failed ClickHouse requests, by ClickHouse error code (or the failure kind when the "
                          "server did not answer) and operation")
                    .Register(runtime.metrics())),
        poison_(prometheus::BuildCounter()
                    .Name("relay_stats_poison_records_total")
                    .Help("Records sent to the dead-letter topic, by input topic")
                    .Register(runtime.metrics())),
        lag_(prometheus::BuildGauge()
                 .Name("relay_stats_lag_seconds")
                 .Help("Age of the oldest record of the last batch landed (record timestamp to insert ack)")
                 .Register(runtime.metrics())
                 .Add({})),
        rollups_(prometheus::BuildCounter()
                     .Name("relay_stats_rollup_windows_total")
                     .Help("Rollup windows recomputed")
                     .Register(runtime.metrics())
                     .Add({})),
        rollups_pending_(prometheus::BuildGauge()
                             .Name("relay_stats_rollup_windows_pending")
                             .Help("Rollup windows marked but not yet recomputed (after the last refresh)")
                             .Register(runtime.metrics())
                             .Add({})),
        prunes_(prometheus::BuildCounter()
                    .Name("relay_stats_snapshot_prunes_total")
                    .Help("Rounds that removed superseded rows of the per-window snapshots (ClickHouse mutations)")
                    .Register(runtime.metrics())
                    .Add({})),
        schema_version_(prometheus::BuildGauge()
                            .Name("relay_stats_schema_version")
                            .Help("Schema migration applied in ClickHouse (readiness needs the latest)")
                            .Register(runtime.metrics())
                            .Add({})) {}

 public:
  // Called once, by service::Wired (Start): clients, routes, checks, tasks.
  absl::Status Wire(service::Runtime& runtime) {
    const StatsSettings& s = settings_;
    // Every series a dashboard or alert reads exists from the start, at 0
    // (a counter that appears only with its first error cannot be told
    // apart from a missing scrape): errors by operation, poison by input.
    for (const char* op : {"insert", "mark", "queue_snapshot", "rollup", "prune", "check"}) {
      errors_.Add({{"code", ""}, {"op", op}});
    }
    for (const std::string* t : {&s.topics.webhooks, &s.topics.dispatches, &s.topics.outcomes, &s.topics.results,
                                 &s.topics.test_reports, &s.topics.cluster_events}) {
      poison_.Add({{"topic", *t}});
    }
    auto& metrics = runtime.metrics();
    RELAY_ASSIGN_OR_RETURN(producer_, runtime.factories().producer(s.kafka, &metrics));
    // Ingestion first: while one of its inserts runs, the HUD's queries
    // (priority 2) wait at their next block. ClickHouse's `priority`: a
    // smaller number goes first, 0 (every other query) takes no part.
    clickhouse::ClientOptions writer_options = s.clickhouse;
    writer_options.settings.emplace("priority", "1");
    RELAY_ASSIGN_OR_RETURN(writer_, clickhouse::Client::New(writer_options));
    RELAY_ASSIGN_OR_RETURN(refresher_, clickhouse::Client::New(s.clickhouse));
    RELAY_ASSIGN_OR_RETURN(checker_, clickhouse::Client::New(s.clickhouse));
    RELAY_ASSIGN_OR_RETURN(snapshotter_, clickhouse::Client::New(s.clickhouse));
    hud::HudOptions hud_options;
    hud_options.clickhouse = s.clickhouse;
    hud_options.clickhouse.user = s.hud_clickhouse_user;
    hud_options.clickhouse.password = s.hud_clickhouse_password;
    hud_options.clickhouse.timeout = s.hud_timeout;
    hud_options.clickhouse.max_attempts = 1;  // the reader reloads; retries would only hold a thread
    hud_options.clickhouse.settings = {{"max_rows_to_read", absl::StrCat(s.hud_max_rows_to_read)},
                                       {"max_memory_usage", absl::StrCat(s.hud_max_memory_usage)},
                                       {"max_threads", absl::StrCat(s.hud_max_threads)},
                                       {"priority", "2"}};
    // On a cluster the pages read as every other reader does (one
    // server's results); the insert settings do not concern them.
    if (!s.clickhouse_cluster.empty()) {
      hud_options.clickhouse.settings.insert(ClusterReadSettings().begin(), ClusterReadSettings().end());
    }
    hud_options.threads = s.hud_threads;
    hud_options.timeout = s.hud_timeout;
    hud_options.cache.ttl = s.hud_cache_ttl;
    hud_options.max_days = s.hud_max_days;
    hud_ = std::make_unique<hud::HudServer>(std::move(hud_options), metrics);
    hud_->AddRoutes(runtime.router());
    RELAY_ASSIGN_OR_RETURN(tier_refresher_, clickhouse::Client::New(s.clickhouse));
    // The files CI jobs download (test times, slow, flaky and disabled
    // tests), recomputed in the background and served from memory.
    CiFilesOptions ci;
    ci.days = s.ci_files_days;
    ci.slow_threshold_seconds = s.ci_slow_threshold.count() / 1000.0;
    ci.dir = s.ci_files_dir;
    ci.max_age = std::chrono::duration_cast<std::chrono::seconds>(s.ci_files_interval);
    ci.max_file_bytes = static_cast<size_t>(s.ci_files_max_bytes);
    ci.disabled.repos = {s.ci_files_upstreams.begin(), s.ci_files_upstreams.end()};
    ci.disabled.associations = {s.ci_disabled_associations.begin(), s.ci_disabled_associations.end()};
    ci.disabled.user_ids = {s.ci_disabled_user_ids.begin(), s.ci_disabled_user_ids.end()};
    ci.disabled_days = s.ci_disabled_days;
    if (s.ci_files_upstreams.empty()) {
      log::Warn("stats.ci_files_upstreams is empty: disabled-tests-condensed.json disables no test", {});
    }
    ci_files_ = std::make_unique<CiFiles>(std::move(ci), metrics);
    ci_files_->AddRoutes(runtime.router());
    RELAY_ASSIGN_OR_RETURN(ci_refresher_, clickhouse::Client::New(s.clickhouse));

    kafka::ConsumerOptions co =
        service::GroupOptions(s.kafka, s.group_id,
                              {s.topics.webhooks, s.topics.dispatches, s.topics.outcomes, s.topics.results,
                               s.topics.test_reports, s.topics.cluster_events});
    co.retry_backoff_min = 500ms;
    co.retry_backoff_max = 30s;
    // A quarter of the memory budget for records librdkafka prefetches, a
    // quarter for the batch in hand, the rest for the rows built from it.
    // (queued.max.messages.kbytes bounds the high-level consumer's one
    // queue, whatever the number of partitions; a fetch response in flight
    // comes on top, up to fetch.max.bytes.)
    co.fetch_queue_kbytes = std::max<int64_t>(1024, s.max_buffer_bytes / 4 / 1024);
    RELAY_ASSIGN_OR_RETURN(consumer_, service::GroupConsumer::Open(runtime, std::move(co), producer_.get()));
    runtime.AddReadinessCheck("clickhouse", [this] {
      std::lock_guard lock(health_mu_);
      return clickhouse_health_;
    });
    runtime.Every(5s, [this] { CheckClickHouse(); });
    runtime.Every(s.rollup_interval, [this] { RefreshRollups(); });
    runtime.Every(s.queue_snapshot_interval, [this] { SnapshotQueueTimes(); });
    runtime.Every(hud_->tier_report_interval(), [this] {
      {
        std::lock_guard lock(health_mu_);
        if (!clickhouse_health_.ok()) return;  // not reachable or not migrated: nothing to report yet
      }
      hud_->RefreshTierReport(*tier_refresher_);
    });
    runtime.Every(s.ci_files_interval, [this] {
      {
        std::lock_guard lock(health_mu_);
        if (!clickhouse_health_.ok()) return;
      }
      if (auto st = ci_files_->Refresh(*ci_refresher_); !st.ok()) {
        log::Warn("ci files not refreshed", {{"error", st.ToString()}});
      }
    });

    kafka::BatchOptions batches;
    batches.max_records = s.batch_rows;
    batches.max_bytes = std::max<int64_t>(1 << 20, s.max_buffer_bytes / 4);
    batches.max_wait = s.batch_interval;
    // A quarter of a full batch (16 MiB at the default budget: ~250,000 test
    // cases, a few deliveries' worth of webhooks) makes inserts as large as
    // waiting would: handed over once nothing more is waiting.
    batches.enough_bytes = batches.max_bytes / 4;
    consumer_->Start(batches, [this](kafka::Batch& b) { return HandleBatch(b); });
    log::Info("relay-stats configured", {{"clickhouse", s.clickhouse.url},
                                         {"database", s.clickhouse.database},
                                         {"cluster", s.clickhouse_cluster},
                                         {"batch_rows", static_cast<int64_t>(s.batch_rows)},
                                         {"max_buffer_bytes", s.max_buffer_bytes}});
    return absl::OkStatus();
  }

 private:

  void Stop() {
    if (stopping_.exchange(true)) return;
    if (hud_) hud_->Stop();
    if (consumer_) consumer_->Stop();
  }

  // --- ingestion (the consumer thread) -------------------------------------

  // Converting and inserting overlap: when a chunk of rows is full it is
  // inserted on a thread of its own while the consuming thread converts the
  // next records into the other buffer (issue 32: done in turn, ClickHouse
  // idled while relay converted and relay while ClickHouse inserted). At
  // most one insert runs, and HandleBatch returns only once every chunk of
  // the batch is in ClickHouse, so offsets are still stored only after the
  // effect; on any error the batch's rows are dropped and it comes again
  // whole (inserts are idempotent). The rollup windows the batch touched
  // are marked once, after its last insert (a mark per chunk was an insert
  // of its own, a part in ClickHouse, each waited for).
  absl::Status HandleBatch(kafka::Batch& batch) {
    // The rows of one insert: bounded by stats.batch_rows and by a quarter
    // of the memory budget, whatever the batch holds.
    const size_t max_bytes = static_cast<size_t>(std::max<int64_t>(1 << 20, settings_.max_buffer_bytes / 4));
    int64_t oldest_ms = 0;
    const auto& records = batch.records();
    absl::Status failed;
    for (size_t i = 0; i < records.size() && failed.ok(); ++i) {
      const kafka::ConsumedRecord& r = records[i];
      if (absl::Status st = Convert(settings_.topics, r, converting_); !st.ok()) {
        poison_.Add({{"topic", r.topic}}).Increment();
        log::Warn("record dead-lettered",
                  {{"topic", r.topic}, {"partition", r.partition}, {"offset", r.offset}, {"reason", std::string(st.message())}});
        batch.Reject(i, std::string(st.message()));
        continue;
      }
      if (r.timestamp_ms > 0 && (oldest_ms == 0 || r.timestamp_ms < oldest_ms)) oldest_ms = r.timestamp_ms;
      if (converting_.rows() >= settings_.batch_rows || converting_.bytes() >= max_bytes) failed = HandOver();
    }
    if (failed.ok()) failed = HandOver();
    if (absl::Status last = AwaitInsert(); failed.ok()) failed = last;
    converting_.Clear();
    std::set<Window> windows = std::exchange(batch_windows_, {});
    RELAY_RETURN_IF_ERROR(failed);
    if (absl::Status st = MarkWindows(*writer_, windows, clock_->UnixMillis()); !st.ok()) {
      errors_.Add({{"code", ErrorLabel(st)}, {"op", "mark"}}).Increment();
      return st;
    }
    if (oldest_ms > 0) lag_.Set(static_cast<double>(clock_->UnixMillis() - oldest_ms) / 1000.0);
    return absl::OkStatus();
  }

  // Waits for the chunk being inserted, then starts inserting the one just
  // converted (the buffers swap: the next chunk is converted into the one
  // the insert emptied, its memory kept). The earlier insert's error, if
  // any (nothing new is started then).
  absl::Status HandOver() {
    RELAY_RETURN_IF_ERROR(AwaitInsert());
    batch_windows_.merge(converting_.windows());
    converting_.windows().clear();  // merge leaves the ones already there
    if (converting_.rows() == 0) return absl::OkStatus();
    std::swap(converting_, inserting_);
    insert_ = std::async(std::launch::async, [this] {
      absl::Status st = InsertRows(inserting_);
      inserting_.Clear();
      return st;
    });
    return absl::OkStatus();
  }

  absl::Status AwaitInsert() { return insert_.valid() ? insert_.get() : absl::OkStatus(); }

  // Inserts every table's rows (their rollup windows are marked by
  // HandleBatch, once the batch's last insert is in).
  absl::Status InsertRows(Rows& rows) {
    for (const auto& [table, data] : rows.tables()) {
      if (data.rows() == 0) continue;
      auto start = std::chrono::steady_clock::now();
      absl::Status st = writer_->Insert(table->name, table->columns, "RowBinary", data.data(), /*idempotent=*/true);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!st.ok()) {
        errors_.Add({{"code", ErrorLabel(st)}, {"op", "insert"}}).Increment();
        log::Warn("insert failed; the batch will be retried",
                  {{"table", table->name}, {"rows", static_cast<int64_t>(data.rows())}, {"error", std::string(st.message())}});
        return st;
      }
      inserted_.Add({{"table", table->name}}).Increment(static_cast<double>(data.rows()));
      insert_seconds_.Add({{"table", table->name}}, kSecondsBuckets).Observe(secs);
      insert_rows_.Add({{"table", table->name}}, kRowsBuckets).Observe(static_cast<double>(data.rows()));
    }
    return absl::OkStatus();
  }

  // --- periodic (host threads) ---------------------------------------------

  void SnapshotQueueTimes() {
    auto r = stats::SnapshotQueueTimes(*snapshotter_);
    if (!r.ok()) {
      errors_.Add({{"code", ErrorLabel(r.status())}, {"op", "queue_snapshot"}}).Increment();
      log::Warn("queue-time snapshot failed; taken again next interval", {{"error", std::string(r.status().message())}});
    }
  }

  void RefreshRollups() {
    auto r = Refresh(*refresher_, [this] { return clock_->UnixMillis(); }, 50, settings_.rollup_window_interval,
                     &stopping_);
    if (!r.ok()) {
      errors_.Add({{"code", ErrorLabel(r.status())}, {"op", "rollup"}}).Increment();
      log::Warn("rollup refresh failed", {{"error", std::string(r.status().message())}});
      return;
    }
    if (r->failed > 0) {
      errors_.Add({{"code", ErrorLabel(r->last_error)}, {"op", "rollup"}}).Increment(r->failed);
      log::Warn("rollup windows failed; retried next round",
                {{"windows", r->failed}, {"last_error", std::string(r->last_error.message())}});
    }
    rollups_.Increment(r->windows);
    rollups_pending_.Set(static_cast<double>(r->pending + r->failed));
    // Superseded snapshot rows, once some window was recomputed since the
    // last prune, at most every snapshot_prune_interval (mutations rewrite
    // parts: not once per window).
    computed_since_prune_ += r->windows;
    auto now = std::chrono::steady_clock::now();
    if (computed_since_prune_ > 0 && now - last_prune_ >= settings_.snapshot_prune_interval) {
      if (absl::Status st = PruneSnapshots(*refresher_, {settings_.clickhouse_cluster, settings_.clickhouse.database},
                                         settings_.clickhouse);
          !st.ok()) {
        errors_.Add({{"code", ErrorLabel(st)}, {"op", "prune"}}).Increment();
        log::Warn("pruning superseded snapshots failed; retried next round", {{"error", std::string(st.message())}});
      } else {
        prunes_.Increment();
        computed_since_prune_ = 0;
        last_prune_ = now;
      }
    }
  }

  void CheckClickHouse() {
    absl::Status health;
    auto version = AppliedSchemaVersion(*checker_, settings_.clickhouse_cluster);
    if (!version.ok()) {
      errors_.Add({{"code", ErrorLabel(version.status())}, {"op", "check"}}).Increment();
      // The ledger is read through its Distributed table, from every
      // shard: 279 (ALL_CONNECTION_TRIES_FAILED) is a shard none of whose
      // replicas answers, and ingestion waits for it.
      bool shard_down = !settings_.clickhouse_cluster.empty() && clickhouse::ServerErrorCode(version.status()) == 279;
      health = absl::UnavailableError(absl::StrCat(
          "clickhouse: ", shard_down ? "a shard of cluster " + settings_.clickhouse_cluster + " is unreachable: " : "",
          version.status().message()));
    } else {
      schema_version_.Set(*version);
      // Days are UTC days (computed here from UTC times); today() and
      // toDate() in the dashboards use the server's zone.
      if (auto tz = checker_->Query("SELECT timezone()"); tz.ok() && !tz_warned_) {
        std::string zone(absl::StripAsciiWhitespace(*tz));
        if (zone != "UTC" && zone != "Etc/UTC") {
          log::Warn("ClickHouse does not run in UTC: dashboards' today() and day columns disagree near midnight",
                    {{"timezone", zone}});
        }
        tz_warned_ = true;
      }
      if (*version < LatestSchemaVersion()) {
        health = absl::FailedPreconditionError(absl::StrCat("schema at migration ", *version, ", this build needs ",
                                                            LatestSchemaVersion(), ": run relay-stats migrate"));
      }
    }
    std::lock_guard lock(health_mu_);
    if (health.ok() != clickhouse_health_.ok()) {
      if (health.ok()) log::Info("clickhouse ready", {{"schema_version", static_cast<int64_t>(*version)}});
      else log::Warn("clickhouse not ready", {{"reason", std::string(health.message())}});
    }
    clickhouse_health_ = health;
  }

  static inline const prometheus::Histogram::BucketBoundaries kSecondsBuckets{0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                             0.5,   1,    2.5,   5,    10,  30};
  static inline const prometheus::Histogram::BucketBoundaries kRowsBuckets{1,      10,      100,     1'000,
                                                                          10'000, 50'000, 100'000, 500'000};

  StatsSettings settings_;
  const Clock* clock_;
  std::unique_ptr<kafka::Producer> producer_;
  std::unique_ptr<service::GroupConsumer> consumer_;
  // One client per thread that uses one (a Client is one connection): the
  // consumer's, the rollups', the readiness check's, the queue snapshot's.
  std::unique_ptr<clickhouse::Client> writer_, refresher_, checker_, snapshotter_;
  std::unique_ptr<hud::HudServer> hud_;  // its pages run on threads of their own
  std::unique_ptr<clickhouse::Client> tier_refresher_;  // the HUD's tier report, in the background
  std::unique_ptr<CiFiles> ci_files_;                   // /ci/<file>
  std::unique_ptr<clickhouse::Client> ci_refresher_;    // their recomputation, in the background
  std::atomic<bool> stopping_{false};
  // Two chunks of rows (HandleBatch): the one the consumer thread converts
  // into, and the one insert_ is inserting (its thread alone touches it
  // until insert_ is waited for). Each holds at most a quarter of
  // stats.max_buffer_bytes, so the two with the batch in hand and the
  // fetch queue stay within it.
  Rows converting_, inserting_;
  std::future<absl::Status> insert_;
  std::set<Window> batch_windows_;  // the batch's, from the chunks handed over

  bool tz_warned_ = false;  // host thread of CheckClickHouse only
  std::mutex health_mu_;
  absl::Status clickhouse_health_ = absl::UnavailableError("not checked yet");

  prometheus::Family<prometheus::Counter>& inserted_;
  prometheus::Family<prometheus::Histogram>& insert_seconds_;
  prometheus::Family<prometheus::Histogram>& insert_rows_;
  prometheus::Family<prometheus::Counter>& errors_;
  prometheus::Family<prometheus::Counter>& poison_;
  prometheus::Gauge& lag_;
  prometheus::Counter& rollups_;
  prometheus::Gauge& rollups_pending_;
  prometheus::Counter& prunes_;
  int64_t computed_since_prune_ = 0;  // host task thread (RefreshRollups) only
  std::chrono::steady_clock::time_point last_prune_{};
  prometheus::Gauge& schema_version_;
};

}  // namespace

const std::map<std::string, std::string>& ClusterReadSettings() {
  static const auto* settings = new std::map<std::string, std::string>{
      {"distributed_product_mode", "global"},
      // 18.16 answers a query with FINAL and ORDER BY on a Distributed
      // table, read from the local replica, with "Cannot find column <the
      // version column> in source stream" (seen on clickhouse-dev's
      // cluster; schema_migrations' ledger read failed so). Reading every
      // shard, the local one too, over the network avoids that path.
      {"prefer_localhost_replica", "0"},
  };
  return *settings;
}

clickhouse::ClientOptions ReadClickHouseOptions(Config& config, std::string* cluster) {
  clickhouse::ClientOptions o;
  o.url = config.String("clickhouse.url", "http://127.0.0.1:8123");
  o.database = config.String("clickhouse.database", "relay");
  o.user = config.String("clickhouse.user", "default");
  o.password = ReadSecretFile(config, "clickhouse.password_file");
  o.timeout = config.Duration("clickhouse.timeout", 60s, 1s, 1h);
  std::string name = config.String("stats.clickhouse.cluster", "");
  int64_t quorum = config.Int("stats.clickhouse.insert_quorum", 2, 1, 16);
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') {
      config.Fail("stats.clickhouse.cluster", "'" + name + "' is not a cluster name (letters, digits, '_', '-')");
      break;
    }
  }
  if (!name.empty()) {
    for (char c : o.database) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
        config.Fail("clickhouse.database", "'" + o.database +
                                               "': on a cluster the database name is letters, digits and '_' (the "
                                               "cluster form writes it into table names and ZooKeeper paths)");
        break;
      }
    }
    // Both waits end before the request does, so the server's own error
    // (which replica, which shard) is what the caller sees.
    int64_t half_ms = std::max<int64_t>(1000, o.timeout.count() / 2);
    o.settings.insert(ClusterReadSettings().begin(), ClusterReadSettings().end());
    o.settings["insert_distributed_sync"] = "1";
    o.settings["insert_distributed_timeout"] = absl::StrCat(half_ms / 1000);
    if (quorum > 1) {
      o.settings["insert_quorum"] = absl::StrCat(quorum);
      o.settings["insert_quorum_timeout"] = absl::StrCat(half_ms);
    }
  }
  if (cluster) *cluster = name;
  return o;
}

absl::StatusOr<StatsSettings> LoadSettings(Config& config, const service::CommonSettings& common) {
  StatsSettings s;
  s.kafka = service::ReadProducerOptions(config, "relay-stats");
  s.group_id = config.String("kafka.group_id", "relay-stats");
  s.clickhouse = ReadClickHouseOptions(config, &s.clickhouse_cluster);
  s.batch_rows = static_cast<size_t>(config.Int("stats.batch_rows", 100'000, 1'000, 10'000'000));
  s.batch_interval = config.Duration("stats.batch_interval", 1s, 10ms, 60s);
  s.max_buffer_bytes = config.Bytes("stats.max_buffer_bytes", 256LL << 20, 16LL << 20, 64LL << 30);
  s.rollup_interval = config.Duration("stats.rollup_interval", 5s, 100ms, 1h);
  s.rollup_window_interval = config.Duration("stats.rollup_window_interval", 60s, 0ms, 24h);
  s.queue_snapshot_interval = config.Duration("stats.queue_snapshot_interval", 5min, 1s, 24h);
  s.snapshot_prune_interval = config.Duration("stats.snapshot_prune_interval", 10min, 1s, 24h);
  // Two pages at once: with four, 200 readers cut ingestion to 79% of its
  // unloaded rate on 2 cores; with two, it kept 93-107% (docs/benchmarks.md).
  s.hud_threads = static_cast<int>(config.Int("stats.hud_threads", 2, 1, 64));
  s.hud_timeout = config.Duration("stats.hud_timeout", 10s, 1s, 10min);
  // A page answers before its request is given up on (503 at
  // http.handler_timeout), with time left to kill a query it gave up on:
  // otherwise the query would go on for nobody.
  if (s.hud_timeout + kHudKillMargin > common.http.handler_timeout) {
    config.Fail("stats.hud_timeout",
                absl::StrCat("must be at most http.handler_timeout (", common.http.handler_timeout.count(),
                             " ms) less ", kHudKillMargin.count(), " ms, so a page's queries end before its request"));
  }
  s.hud_clickhouse_user = config.String("stats.hud_clickhouse_user", "relay_hud");
  s.hud_clickhouse_password = ReadSecretFile(config, "stats.hud_clickhouse_password_file");
  if (s.hud_clickhouse_user == s.clickhouse.user) {
    config.Fail("stats.hud_clickhouse_user", "must differ from clickhouse.user (the writer): the HUD reads as a "
                                             "read-only user of its own");
  }
  s.hud_max_rows_to_read = config.Int("stats.hud_max_rows_to_read", 200'000'000, 1'000, 100'000'000'000);
  s.hud_max_memory_usage = config.Bytes("stats.hud_max_memory_usage", 1LL << 30, 16LL << 20, 256LL << 30);
  // One core per HUD query by default: a page may be slower, but readers
  // cannot take every core from the inserts.
  s.hud_max_threads = static_cast<int>(config.Int("stats.hud_max_threads", 1, 1, 64));
  s.hud_cache_ttl = config.Duration("stats.hud_cache_ttl", 10s, 0ms, 10min);
  s.hud_max_days = static_cast<int>(config.Int("stats.hud_max_days", 90, 30, 365));
  s.ci_files_interval = config.Duration("stats.ci_files_interval", 5min, 1s, 24h);
  s.ci_files_dir = config.String("stats.ci_files_dir", "");
  s.ci_files_days = static_cast<int>(config.Int("stats.ci_files_days", 7, 1, 365));
  s.ci_slow_threshold = config.Duration("stats.ci_slow_threshold", 60s, 1ms, 24h);
  s.ci_files_max_bytes = config.Bytes("stats.ci_files_max_bytes", 32LL << 20, 1LL << 10, 1LL << 30);
  // Whose issues may disable tests upstream (ci_files.h, DisabledTestsPolicy).
  for (const std::string& repo : config.StringList("stats.ci_files_upstreams")) {
    if (!allowlist::IsValidRepoName(repo)) {
      config.Fail("stats.ci_files_upstreams", "'" + repo + "' is not an owner/name repository");
    }
    s.ci_files_upstreams.push_back(absl::AsciiStrToLower(repo));
  }
  s.ci_disabled_associations = config.StringList("stats.ci_disabled_associations");
  if (s.ci_disabled_associations.empty()) s.ci_disabled_associations = DefaultTrustedAssociations();
  for (std::string& a : s.ci_disabled_associations) {
    a = absl::AsciiStrToUpper(a);
    if (!AuthorAssociations().count(a)) {
      config.Fail("stats.ci_disabled_associations",
                  "'" + a + "' is not one of GitHub's author_association values (" +
                      absl::StrJoin(AuthorAssociations(), ", ") + ")");
    }
  }
  for (const std::string& id : config.StringList("stats.ci_disabled_user_ids")) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(id, &n) || n <= 0) {
      config.Fail("stats.ci_disabled_user_ids", "'" + id + "' is not a GitHub user id (a positive number)");
    }
    s.ci_disabled_user_ids.push_back(n);
  }
  s.ci_disabled_days = static_cast<int>(config.Int("stats.ci_disabled_days", 365, 1, 3650));
  // Input topics (defaults: the suite's names); their DLQs are <topic>.dlq.
  for (auto [key, topic] : {std::pair{"webhooks", &s.topics.webhooks}, std::pair{"dispatches", &s.topics.dispatches},
                            std::pair{"outcomes", &s.topics.outcomes}, std::pair{"results", &s.topics.results},
                            std::pair{"test_reports", &s.topics.test_reports},
                            std::pair{"cluster_events", &s.topics.cluster_events}}) {
    *topic = config.String(std::string("stats.topics.") + key, *topic);
  }
  // Records are converted by the topic they come from: one topic, one kind.
  std::set<std::string> seen;
  for (const std::string* t : {&s.topics.webhooks, &s.topics.dispatches, &s.topics.outcomes, &s.topics.results,
                               &s.topics.test_reports, &s.topics.cluster_events}) {
    if (!seen.insert(*t).second) config.Fail("stats.topics", "topic " + *t + " is named twice");
  }
  return s;
}

service::Definition Definition() {
  return service::Define("relay-stats", LoadSettings, StatsService::Start);
}

}  // namespace relay::stats
