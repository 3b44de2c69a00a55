#include "relay/stats/tier_report.h"

#include <map>

#include <boost/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "relay/base/status.h"
#include "relay/stats/sql_files.h"

namespace relay::stats {
namespace {

// The query's per-rule columns, in the order they are reported.
constexpr const char* kRules[] = {"time_at_l2", "p50_e2e", "over_3h", "queue", "timeouts", "pass_rate"};

struct Row {
  std::map<std::string, std::string> cols;
  double Num(const std::string& name) const {
    double d = 0;
    auto it = cols.find(name);
    if (it != cols.end()) (void)absl::SimpleAtod(it->second, &d);
    return d;
  }
};

absl::StatusOr<std::map<std::string, Row>> RunWindow(clickhouse::Client& client, int days) {
  RELAY_ASSIGN_OR_RETURN(NamedQuery q, FindQuery("tier_health"));
  RELAY_ASSIGN_OR_RETURN(std::string sql, Bind(q, {{"days", std::to_string(days)}}));
  RELAY_ASSIGN_OR_RETURN(std::string tsv, client.Query(sql + "\nFORMAT TabSeparatedWithNames"));
  std::vector<absl::string_view> lines = absl::StrSplit(tsv, '\n', absl::SkipEmpty());
  if (lines.empty()) return absl::DataLossError("tier_health: no header in the answer");
  std::vector<std::string> names = absl::StrSplit(lines[0], '\t');
  std::map<std::string, Row> out;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> f = absl::StrSplit(lines[i], '\t');
    if (f.size() != names.size()) return absl::DataLossError("tier_health: a row with the wrong column count");
    Row r;
    for (size_t c = 0; c < f.size(); ++c) r.cols[names[c]] = f[c];
    out[r.cols["repo"]] = std::move(r);
  }
  return out;
}

TierWindow Window(const Row& r, int days, bool judge_time_at_l2) {
  TierWindow w;
  w.days = days;
  w.jobs = static_cast<int64_t>(r.Num("jobs"));
  w.p50_e2e_s = r.Num("p50_e2e_s");
  w.over_3h_share = r.Num("over_3h_share");
  w.mean_queue_s = r.Num("mean_queue_s");
  w.timeout_rate = r.Num("timeout_rate");
  w.pass_rate = r.Num("pass_rate");
  for (const char* rule : kRules) {
    if (!judge_time_at_l2 && std::string_view(rule) == "time_at_l2") continue;
    if (r.Num(absl::StrCat("ok_", rule)) == 0) w.failed_rules.emplace_back(rule);
  }
  return w;
}

}  // namespace

absl::StatusOr<std::vector<TierVerdict>> TierReport(clickhouse::Client& client) {
  RELAY_ASSIGN_OR_RETURN(auto fourteen, RunWindow(client, 14));
  RELAY_ASSIGN_OR_RETURN(auto seven, RunWindow(client, 7));
  std::vector<TierVerdict> out;
  for (const auto& [repo, row] : fourteen) {
    TierVerdict v;
    v.repo = repo;
    v.level = static_cast<int>(row.Num("level"));
    v.days_at_l2 = row.Num("days_at_l2");
    v.promotion = Window(row, 14, /*judge_time_at_l2=*/true);
    auto it = seven.find(repo);
    v.demotion = Window(it != seven.end() ? it->second : Row{}, 7, false);
    if (v.level <= 1) {
      v.verdict = "not-eligible";
      v.reason = "L1: results are not recorded below L2";
    } else if (v.level == 2) {
      v.verdict = v.promotion.failed_rules.empty() ? "promote-to-L3" : "stays-L2";
      v.reason = v.promotion.failed_rules.empty() ? "every L3 rule holds over 14 days"
                                                  : "over 14 days, fails: " + absl::StrJoin(v.promotion.failed_rules, ", ");
    } else {
      v.verdict = v.demotion.failed_rules.empty() ? absl::StrCat("keeps-L", v.level) : "demote-to-L2";
      v.reason = v.demotion.failed_rules.empty() ? "every L3 rule holds over 7 days"
                                                 : "over 7 days, fails: " + absl::StrJoin(v.demotion.failed_rules, ", ");
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::string TierReportTable(const std::vector<TierVerdict>& report) {
  std::string out = absl::StrFormat("%-32s %5s %7s %6s %9s %7s %9s %8s %6s  %-14s %s\n", "repo", "level", "days@L2",
                                    "jobs", "p50_e2e", ">3h", "queue", "timeout", "pass", "verdict", "reason");
  for (const auto& v : report) {
    // The figures of the window the verdict is judged on.
    const TierWindow& w = v.level >= 3 ? v.demotion : v.promotion;
    absl::StrAppendFormat(&out, "%-32s %5d %7.1f %6d %8.0fm %6.1f%% %8.1fm %7.1f%% %5.1f%%  %-14s %s\n", v.repo,
                          v.level, v.days_at_l2, w.jobs, w.p50_e2e_s / 60, w.over_3h_share * 100, w.mean_queue_s / 60,
                          w.timeout_rate * 100, w.pass_rate * 100, v.verdict, v.reason);
  }
  return out;
}

std::string TierReportJson(const std::vector<TierVerdict>& report) {
  namespace json = boost::json;
  auto window = [](const TierWindow& w) {
    json::array failed;
    for (const auto& f : w.failed_rules) failed.emplace_back(f);
    return json::object{{"days", w.days},
                        {"jobs", w.jobs},
                        {"p50_e2e_s", w.p50_e2e_s},
                        {"over_3h_share", w.over_3h_share},
                        {"mean_queue_s", w.mean_queue_s},
                        {"timeout_rate", w.timeout_rate},
                        {"pass_rate", w.pass_rate},
                        {"failed_rules", std::move(failed)}};
  };
  json::array repos;
  for (const auto& v : report) {
    repos.emplace_back(json::object{{"repo", v.repo},
                                    {"level", v.level},
                                    {"days_at_l2", v.days_at_l2},
                                    {"verdict", v.verdict},
                                    {"reason", v.reason},
                                    {"promotion_window", window(v.promotion)},
                                    {"demotion_window", window(v.demotion)}});
  }
  return json::serialize(json::object{{"repos", std::move(repos)}}) + "\n";
}

}  // namespace relay::stats
