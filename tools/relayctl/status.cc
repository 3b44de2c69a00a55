// relayctl status: topics and their end offsets, consumer groups' lag in
// records and in age, dead letters, each service's /readyz, GitHub budget
// and the redelivery reconciler's counters (from relay-dispatch's /metrics).
#include <algorithm>
#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "relay/base/status.h"
#include "relay/http/client.h"
#include "relay/kafka/cluster_admin.h"
#include "relayctl.h"

namespace relay::relayctl {

absl::StatusOr<std::pair<unsigned, std::string>> HttpGet(const std::string& base_url, const std::string& path,
                                                         std::chrono::milliseconds timeout) {
  http::ClientOptions o;
  o.connect_timeout = timeout;
  o.request_timeout = timeout;
  o.user_agent = "relayctl";
  auto client = http::Client::New(base_url, o);
  if (!client.ok()) return client.status();
  auto r = (*client)->Send(boost::beast::http::verb::get, path, {}, "");
  if (!r.ok()) return r.status();
  return std::make_pair(r->status, r->body);
}

std::map<std::string, double> ParseMetrics(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    auto sp = line.rfind(' ');
    if (sp == std::string_view::npos) continue;
    try {
      out[std::string(line.substr(0, sp))] = std::stod(std::string(line.substr(sp + 1)));
    } catch (const std::exception&) {
    }
  }
  return out;
}

namespace {

namespace json = boost::json;

using TopicOffsets = std::map<std::string, std::map<int32_t, kafka::PartitionOffsets>>;

struct GroupLag {
  std::string group, state, topic;
  int members = 0;
  int64_t lag = 0;
  int64_t oldest_age_ms = -1;  // -1: nothing waiting
};

struct DlqRow {
  std::string topic;
  size_t count = 0, pending = 0;
  std::string newest_reason;
  int64_t newest_age_ms = -1;
};

// Sum of the samples of `name` (any labels).
double Sum(const std::map<std::string, double>& m, const std::string& name) {
  double s = 0;
  for (const auto& [k, v] : m) {
    if (k == name || k.starts_with(name + "{")) s += v;
  }
  return s;
}

// Every topic's partitions' offsets (`offsets`) and its row of the report.
absl::StatusOr<json::array> ReadTopics(kafka::ClusterAdmin& admin, const std::map<std::string, int>& topics,
                                       TopicOffsets& offsets) {
  json::array rows;
  for (const auto& [name, partitions] : topics) {
    RELAY_ASSIGN_OR_RETURN(auto o, admin.Offsets(name));
    offsets[name] = o;
    int64_t records = 0;
    json::array ends;
    for (const auto& [p, po] : o) {
      records += po.high - po.low;
      ends.push_back(po.high);
    }
    rows.push_back({{"topic", name}, {"partitions", partitions}, {"records", records}, {"end_offsets", ends}});
  }
  return rows;
}

// One consumer group's lag on each topic it has committed on.
absl::Status AddGroupLags(kafka::ClusterAdmin& admin, const kafka::GroupDescription& g, const TopicOffsets& offsets,
                          int64_t now, std::vector<GroupLag>& lags) {
  RELAY_ASSIGN_OR_RETURN(auto committed, admin.CommittedOffsets(g.id));
  auto described = admin.DescribeGroup(g.id);
  // Every partition of each topic the group has committed on: one
  // without a commit yet is read from its oldest record (relay's
  // consumers start at the earliest offset).
  std::map<std::string, GroupLag> per_topic;
  for (const auto& [tp, offset] : committed) {
    auto& row = per_topic[tp.topic];
    row.group = g.id;
    row.topic = tp.topic;
    row.state = described.ok() ? described->state : g.state;
    row.members = described.ok() ? described->members : 0;
  }
  for (auto& [topic, row] : per_topic) {
    auto t = offsets.find(topic);
    if (t == offsets.end()) continue;
    for (const auto& [partition, po] : t->second) {
      auto c = committed.find({topic, partition});
      int64_t from = std::max(c == committed.end() ? po.low : c->second, po.low);
      if (po.high <= from) continue;
      auto ts = admin.TimestampAt(topic, partition, from);
      // No record from there on: only transaction markers (lifecycle
      // writes in transactions) lie between the commit and the end.
      if (!ts.ok() && ts.status().code() == absl::StatusCode::kNotFound) continue;
      row.lag += po.high - from;
      if (ts.ok()) row.oldest_age_ms = std::max(row.oldest_age_ms, now - *ts);
    }
  }
  for (auto& [t, row] : per_topic) lags.push_back(row);
  return absl::OkStatus();
}

// Every consumer group's lag, by group id.
absl::StatusOr<std::vector<GroupLag>> ReadGroupLags(kafka::ClusterAdmin& admin, const TopicOffsets& offsets,
                                                    int64_t now) {
  RELAY_ASSIGN_OR_RETURN(auto groups, admin.Groups());
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  std::vector<GroupLag> lags;
  for (const auto& g : groups) RELAY_RETURN_IF_ERROR(AddGroupLags(admin, g, offsets, now, lags));
  return lags;
}

json::array GroupRows(const std::vector<GroupLag>& lags) {
  json::array rows;
  for (const auto& l : lags) {
    rows.push_back({{"group", l.group},
                    {"topic", l.topic},
                    {"state", l.state},
                    {"members", l.members},
                    {"lag_records", l.lag},
                    {"oldest_unconsumed_age_ms", l.oldest_age_ms}});
  }
  return rows;
}

// Every dead-letter topic (*.dlq): its dead letters, those not redriven,
// and the newest one's reason and age.
absl::StatusOr<std::vector<DlqRow>> ReadDeadLetterTopics(const Context& ctx, const std::map<std::string, int>& topics,
                                                         int64_t now) {
  std::vector<DlqRow> dlqs;
  for (const auto& [name, partitions] : topics) {
    if (!name.ends_with(".dlq")) continue;
    DlqRow row;
    row.topic = name;
    RELAY_ASSIGN_OR_RETURN(auto letters, ReadDeadLetters(ctx, name));
    row.count = letters.size();
    int64_t newest = -1;
    for (const auto& d : letters) {
      if (!d.redriven) ++row.pending;
      if (d.timestamp_ms >= newest) {
        newest = d.timestamp_ms;
        row.newest_reason = d.reason;
      }
    }
    row.newest_age_ms = newest < 0 ? -1 : now - newest;
    dlqs.push_back(row);
  }
  return dlqs;
}

json::array DlqRows(const std::vector<DlqRow>& dlqs) {
  json::array rows;
  for (const auto& row : dlqs) {
    rows.push_back({{"topic", row.topic},
                    {"dead_letters", row.count},
                    {"pending", row.pending},
                    {"newest_reason", row.newest_reason},
                    {"newest_age_ms", row.newest_age_ms}});
  }
  return rows;
}

// Each service's /readyz (`healthy` false when one is not ready), and
// relay-dispatch's /metrics into `dispatch_metrics`.
json::array CheckServices(const Context& ctx, bool& healthy, std::map<std::string, double>& dispatch_metrics) {
  json::array rows;
  for (const auto& [name, url] : ctx.services) {
    json::object row{{"service", name}, {"url", url}};
    auto r = HttpGet(url, "/readyz", ctx.timeout);
    if (!r.ok()) {
      row["ready"] = false;
      row["detail"] = std::string(r.status().message());
      healthy = false;
    } else {
      row["ready"] = r->first == 200;
      std::string detail = r->second.substr(0, r->second.find('\n'));
      row["detail"] = detail;
      if (r->first != 200) healthy = false;
    }
    if (name == "dispatch") {
      if (auto m = HttpGet(url, "/metrics", ctx.timeout); m.ok() && m->first == 200) {
        dispatch_metrics = ParseMetrics(m->second);
      }
    }
    rows.push_back(row);
  }
  return rows;
}

// The GitHub budget and the redelivery reconciler's counters, from
// relay-dispatch's metrics (empty without them).
json::object GithubReport(const std::map<std::string, double>& dispatch_metrics) {
  json::object github;
  if (dispatch_metrics.empty()) return github;
  github["writes_left_this_minute"] = Sum(dispatch_metrics, "relay_github_budget_writes_left");
  json::object remaining;
  for (const auto& [k, v] : dispatch_metrics) {
    if (k.starts_with("relay_github_rate_limit_remaining{")) remaining[k.substr(k.find('{'))] = v;
  }
  github["rate_limit_remaining"] = remaining;
  github["queued"] = Sum(dispatch_metrics, "relay_github_queue_depth");
  // Writes the economy saved: superseded by a newer head of their PR,
  // filtered by the repositories' subscriptions.
  github["superseded"] = Sum(dispatch_metrics, "relay_dispatch_writes_superseded_total");
  github["filtered"] = Sum(dispatch_metrics, "relay_dispatch_writes_filtered_total");
  json::object redeliveries;
  for (const auto& [k, v] : dispatch_metrics) {
    if (k.starts_with("relay_redelivery_")) redeliveries[k] = v;
  }
  github["redeliveries"] = redeliveries;
  return github;
}

void PrintKafkaTables(const json::array& topic_rows, const std::vector<GroupLag>& lags,
                      const std::vector<DlqRow>& dlqs) {
  std::cout << absl::StrFormat("%-28s %5s %12s  %s\n", "TOPIC", "PARTS", "RECORDS", "END OFFSETS");
  for (const auto& t : topic_rows) {
    const auto& o = t.as_object();
    std::string ends;
    for (const auto& e : o.at("end_offsets").as_array()) ends += (ends.empty() ? "" : ",") + std::to_string(e.as_int64());
    std::cout << absl::StrFormat("%-28s %5d %12d  %s\n", std::string(o.at("topic").as_string()),
                                 o.at("partitions").as_int64(), o.at("records").as_int64(), ends);
  }
  std::cout << "\n"
            << absl::StrFormat("%-34s %-22s %-20s %7s %10s %s\n", "GROUP", "TOPIC", "STATE", "MEMBERS", "LAG",
                               "OLDEST UNCONSUMED");
  for (const auto& l : lags) {
    std::cout << absl::StrFormat("%-34s %-22s %-20s %7d %10d %s\n", l.group, l.topic, l.state, l.members, l.lag,
                                 l.oldest_age_ms < 0 ? "-" : FormatAge(l.oldest_age_ms));
  }
  std::cout << "\n" << absl::StrFormat("%-28s %8s %8s %8s  %s\n", "DEAD-LETTER TOPIC", "RECORDS", "PENDING", "NEWEST", "NEWEST REASON");
  for (const auto& d : dlqs) {
    std::cout << absl::StrFormat("%-28s %8d %8d %8s  %s\n", d.topic, d.count, d.pending,
                                 d.newest_age_ms < 0 ? "-" : FormatAge(d.newest_age_ms), d.newest_reason.substr(0, 100));
  }
}

void PrintServices(const Context& ctx, const json::array& service_rows, const json::object& github) {
  if (!ctx.services.empty()) {
    std::cout << "\n" << absl::StrFormat("%-10s %-6s %-28s %s\n", "SERVICE", "READY", "URL", "DETAIL");
    for (const auto& s : service_rows) {
      const auto& o = s.as_object();
      std::cout << absl::StrFormat("%-10s %-6s %-28s %s\n", std::string(o.at("service").as_string()),
                                   o.at("ready").as_bool() ? "yes" : "NO", std::string(o.at("url").as_string()),
                                   std::string(o.at("detail").as_string()).substr(0, 100));
    }
  } else {
    std::cout << "\n(no services given: --service NAME=URL or RELAY_SERVICES for /readyz and the GitHub budget)\n";
  }
  if (!github.empty()) {
    std::cout << "\nGITHUB (relay-dispatch)\n";
    std::cout << absl::StrFormat("  writes left this minute   %.0f\n", github.at("writes_left_this_minute").as_double());
    for (const auto& [k, v] : github.at("rate_limit_remaining").as_object()) {
      std::cout << absl::StrFormat("  rate limit remaining %s  %.0f\n", std::string(k), v.as_double());
    }
    std::cout << absl::StrFormat("  writes queued             %.0f\n", github.at("queued").as_double());
    std::cout << absl::StrFormat("  writes superseded         %.0f  (a newer head of the PR went instead)\n",
                                 github.at("superseded").as_double());
    std::cout << absl::StrFormat("  writes filtered           %.0f  (not asked for by the repository's subscription)\n",
                                 github.at("filtered").as_double());
    for (const auto& [k, v] : github.at("redeliveries").as_object()) {
      std::cout << absl::StrFormat("  %-40s %.0f\n", std::string(k), v.as_double());
    }
  }
}

}  // namespace

int Status(const Context& ctx, const std::vector<std::string>& args) {
  auto flags = Flags::Parse(args, {}, {});
  if (!flags.ok()) return Fail(kBadInput, std::string(flags.status().message()));
  if (!flags->positional().empty()) return Fail(kBadInput, "status takes no arguments");
  auto admin = kafka::NewClusterAdmin(ctx.bootstrap, ctx.timeout);
  if (!admin.ok()) return FailStatus(admin.status());
  auto topics = (*admin)->Topics();
  if (!topics.ok()) return FailStatus(topics.status());
  int64_t now = NowMs();

  json::object report;
  TopicOffsets offsets;
  auto topic_rows = ReadTopics(**admin, *topics, offsets);
  if (!topic_rows.ok()) return FailStatus(topic_rows.status());
  report["topics"] = *topic_rows;
  auto lags = ReadGroupLags(**admin, offsets, now);
  if (!lags.ok()) return FailStatus(lags.status());
  report["groups"] = GroupRows(*lags);
  auto dlqs = ReadDeadLetterTopics(ctx, *topics, now);
  if (!dlqs.ok()) return FailStatus(dlqs.status());
  report["dead_letters"] = DlqRows(*dlqs);
  // Healthy means every service given is ready; lag and dead letters are
  // shown for the operator to judge.
  bool healthy = true;
  std::map<std::string, double> dispatch_metrics;
  json::array service_rows = CheckServices(ctx, healthy, dispatch_metrics);
  report["services"] = service_rows;
  json::object github = GithubReport(dispatch_metrics);
  report["github"] = github;
  report["healthy"] = healthy;

  if (ctx.json) {
    PrintJson(report);
    return healthy ? kOk : kUnhealthy;
  }
  PrintKafkaTables(*topic_rows, *lags, *dlqs);
  PrintServices(ctx, service_rows, github);
  if (!healthy) std::cout << "\nNOT HEALTHY: a service is not ready (above)\n";
  return healthy ? kOk : kUnhealthy;
}

}  // namespace relay::relayctl
