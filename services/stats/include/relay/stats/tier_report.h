// The tier health report: for each downstream repo, would the CRCR level
// rules promote it to L3 (judged over 14 days) or demote it from L3 (judged
// over 7 days)? The numbers come from the named query tier_health
// (deploy/clickhouse/queries/tier_health.sql), run once per window; the
// verdict is decided here, from the query's per-rule columns.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "relay/clickhouse/client.h"

namespace relay::stats {

// One repo's figures over one window.
struct TierWindow {
  int days = 0;
  int64_t jobs = 0;
  double p50_e2e_s = 0, over_3h_share = 0, mean_queue_s = 0, timeout_rate = 0, pass_rate = 0;
  std::vector<std::string> failed_rules;  // empty: every L3 rule holds
};

struct TierVerdict {
  std::string repo;
  int level = 0;  // as of the repo's latest dispatch
  double days_at_l2 = 0;
  TierWindow promotion;  // 14 days
  TierWindow demotion;   // 7 days
  // promote-to-L3 | stays-L2 | keeps-L3 | demote-to-L2 | not-eligible (L1)
  std::string verdict;
  std::string reason;
};

absl::StatusOr<std::vector<TierVerdict>> TierReport(clickhouse::Client& client);

std::string TierReportTable(const std::vector<TierVerdict>& report);
std::string TierReportJson(const std::vector<TierVerdict>& report);

}  // namespace relay::stats
