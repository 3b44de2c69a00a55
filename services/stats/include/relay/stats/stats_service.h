// relay-stats: lands every fact the relay learns in ClickHouse.
//
// One consumer group over github.webhooks, relay.dispatches,
// github.outcomes, ci.results, ci.test_reports and cluster.events. Records
// come in batches bounded by rows, bytes and time; each is converted to
// RowBinary rows (rows.h), and the rows go to ClickHouse in one insert per
// table per batch (split only when a batch outgrows stats.batch_rows or
// its byte budget). Offsets are stored only once every insert of the batch
// and its rollup marks were acknowledged; a failed insert rewinds and
// retries the batch after a backoff (the tables make repeats harmless). A
// record that cannot be converted goes to <topic>.dlq with the reason.
// A periodic refresher recomputes the rollup windows that were marked.
// The CI HUD's read-only pages are served under /hud (hud/pages.h).
#pragma once

#include <map>

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "relay/base/config.h"
#include "relay/clickhouse/client.h"
#include "relay/kafka/producer.h"
#include "relay/service/service.h"
#include "relay/stats/rows.h"

namespace relay::stats {

struct StatsSettings {
  kafka::ProducerOptions kafka;  // dead letters
  std::string group_id = "relay-stats";
  Topics topics;
  clickhouse::ClientOptions clickhouse;
  // stats.clickhouse.cluster: the remote_servers name of a ClickHouse
  // cluster (empty: one server). Set, every client above carries the
  // cluster's settings (ReadClickHouseOptions) and the prunes run ON CLUSTER.
  std::string clickhouse_cluster;
  size_t batch_rows = 100'000;                  // rows per insert, at most
  std::chrono::milliseconds batch_interval{1000};  // a batch waits at most this long to fill
  int64_t max_buffer_bytes = 256LL << 20;       // records prefetched + in hand + two chunks of rows built
  std::chrono::milliseconds rollup_interval{5000};         // how often marked windows are looked for
  std::chrono::milliseconds rollup_window_interval{60'000};  // one window recomputed at most this often
  std::chrono::milliseconds queue_snapshot_interval{300'000};  // the HUD's queue-time snapshot, this often
  std::chrono::milliseconds snapshot_prune_interval{600'000};  // superseded snapshot rows removed at most this often
  int hud_threads = 2;                               // HUD pages rendered at once (hud/hud_server.h)
  // A HUD page's whole budget from its request's arrival (its queries
  // included); at most http.handler_timeout less 3 s (the time a query
  // given up on takes to kill), so no query outlives its request.
  std::chrono::milliseconds hud_timeout{10'000};
  std::string hud_clickhouse_user = "relay_hud";     // read-only (readonly=2); its password: hud_clickhouse_password_file
  std::string hud_clickhouse_password;
  int64_t hud_max_rows_to_read = 200'000'000;        // per HUD query (ClickHouse's max_rows_to_read)
  int64_t hud_max_memory_usage = 1LL << 30;          // per HUD query (ClickHouse's max_memory_usage)
  int hud_max_threads = 1;                           // per HUD query (ClickHouse's max_threads)
  std::chrono::milliseconds hud_cache_ttl{10'000};   // a HUD page's answer is reused this long
  int hud_max_days = 90;                             // the longest window a HUD page may be asked for
  std::chrono::milliseconds ci_files_interval{300'000};  // the published CI files (ci_files.h), recomputed this often
  std::string ci_files_dir;                          // set: they are also written here
  int ci_files_days = 7;                             // days of test runs they are made from
  std::chrono::milliseconds ci_slow_threshold{60'000};  // slower on average is a slow test
  int64_t ci_files_max_bytes = 32LL << 20;           // a larger file is refused, the last good one kept
  std::vector<std::string> ci_files_upstreams;       // whose DISABLED issues count (lower-case owner/name)
  std::vector<std::string> ci_disabled_associations;  // trusted author_association values
  std::vector<int64_t> ci_disabled_user_ids;          // authors trusted by GitHub user id (bots)
  int ci_disabled_days = 365;                         // issues whose latest delivery is older are not read
};

// clickhouse.* and stats.clickhouse.* keys (shared by the service and its
// subcommands). With stats.clickhouse.cluster set (its name in *cluster),
// the options carry the settings every request to a cluster needs:
// distributed_product_mode=global (a subquery over a Distributed table reads
// every shard once, so results equal one server's), insert_distributed_sync=1
// and insert_quorum=stats.clickhouse.insert_quorum (an insert returns once
// every row is on its shard's quorum of replicas), with both waits bounded
// by half of clickhouse.timeout.
clickhouse::ClientOptions ReadClickHouseOptions(Config& config, std::string* cluster = nullptr);
// What every read of a cluster needs (ReadClickHouseOptions' and the HUD
// pages'): distributed_product_mode=global and prefer_localhost_replica=0
// (stats_service.cc says why).
const std::map<std::string, std::string>& ClusterReadSettings();
absl::StatusOr<StatsSettings> LoadSettings(Config& config, const service::CommonSettings& common);
service::Definition Definition();

}  // namespace relay::stats
