// relayctl status: topics and their end offsets, consumer groups' lag in
// records and in age, dead letters, each service's /readyz, GitHub budget
// and the redelivery reconciler's counters (from relay-dispatch's /metrics).
#include <algorithm>
#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
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

struct GroupLag {
  std::string group, state, topic;
  int members = 0;
  int64_t lag = 0;
  int64_t oldest_age_ms = -1;  // -1: nothing waiting
};

// Sum of the samples of `name` (any labels).
double Sum(const std::map<std::string, double>& m, const std::string& name) {
  double s = 0;
  for (const auto& [k, v] : m) {
    if (k == name || k.starts_with(name + "{")) s += v;
  }
  return s;
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
  bool healthy = true;

  boost::json::object report;
  // Topics.
  std::map<std::string, std::map<int32_t, kafka::PartitionOffsets>> offsets;
  boost::json::array topic_rows;
  for (const auto& [name, partitions] : *topics) {
    auto o = (*admin)->Offsets(name);
    if (!o.ok()) return FailStatus(o.status());
    offsets[name] = *o;
    int64_t records = 0;
    boost::json::array ends;
    for (const auto& [p, po] : *o) {
      records += po.high - po.low;
      ends.push_back(po.high);
    }
    topic_rows.push_back({{"topic", name}, {"partitions", partitions}, {"records", records}, {"end_offsets", ends}});
  }
  report["topics"] = topic_rows;

  // Consumer groups.
  auto groups = (*admin)->Groups();
  if (!groups.ok()) return FailStatus(groups.status());
  std::sort(groups->begin(), groups->end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  std::vector<GroupLag> lags;
  for (const auto& g : *groups) {
    auto committed = (*admin)->CommittedOffsets(g.id);
    if (!committed.ok()) return FailStatus(committed.status());
    auto described = (*admin)->DescribeGroup(g.id);
    // Every partition of each topic the group has committed on: one
    // without a commit yet is read from its oldest record (relay's
    // consumers start at the earliest offset).
    std::map<std::string, GroupLag> per_topic;
    for (const auto& [tp, offset] : *committed) {
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
        auto c = committed->find({topic, partition});
        int64_t from = std::max(c == committed->end() ? po.low : c->second, po.low);
        if (po.high <= from) continue;
        auto ts = (*admin)->TimestampAt(topic, partition, from);
        // No record from there on: only transaction markers (lifecycle
        // writes in transactions) lie between the commit and the end.
        if (!ts.ok() && ts.status().code() == absl::StatusCode::kNotFound) continue;
        row.lag += po.high - from;
        if (ts.ok()) row.oldest_age_ms = std::max(row.oldest_age_ms, now - *ts);
      }
    }
    for (auto& [t, row] : per_topic) lags.push_back(row);
  }
  boost::json::array group_rows;
  for (const auto& l : lags) {
    group_rows.push_back({{"group", l.group},
                          {"topic", l.topic},
                          {"state", l.state},
                          {"members", l.members},
                          {"lag_records", l.lag},
                          {"oldest_unconsumed_age_ms", l.oldest_age_ms}});
  }
  report["groups"] = group_rows;

  // Dead letters.
  boost::json::array dlq_rows;
  struct DlqRow {
    std::string topic;
    size_t count = 0, pending = 0;
    std::string newest_reason;
    int64_t newest_age_ms = -1;
  };
  std::vector<DlqRow> dlqs;
  for (const auto& [name, partitions] : *topics) {
    if (!name.ends_with(".dlq")) continue;
    DlqRow row;
    row.topic = name;
    auto letters = ReadDeadLetters(ctx, name);
    if (!letters.ok()) return FailStatus(letters.status());
    row.count = letters->size();
    int64_t newest = -1;
    for (const auto& d : *letters) {
      if (!d.redriven) ++row.pending;
      if (d.timestamp_ms >= newest) {
        newest = d.timestamp_ms;
        row.newest_reason = d.reason;
      }
    }
    row.newest_age_ms = newest < 0 ? -1 : now - newest;
    dlq_rows.push_back({{"topic", name},
                        {"dead_letters", row.count},
                        {"pending", row.pending},
                        {"newest_reason", row.newest_reason},
                        {"newest_age_ms", row.newest_age_ms}});
    dlqs.push_back(row);
  }
  report["dead_letters"] = dlq_rows;

  // Services.
  boost::json::array service_rows;
  std::map<std::string, double> dispatch_metrics;
  for (const auto& [name, url] : ctx.services) {
    boost::json::object row{{"service", name}, {"url", url}};
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
    service_rows.push_back(row);
  }
  report["services"] = service_rows;
  boost::json::object github;
  if (!dispatch_metrics.empty()) {
    github["writes_left_this_minute"] = Sum(dispatch_metrics, "relay_github_budget_writes_left");
    boost::json::object remaining;
    for (const auto& [k, v] : dispatch_metrics) {
      if (k.starts_with("relay_github_rate_limit_remaining{")) remaining[k.substr(k.find('{'))] = v;
    }
    github["rate_limit_remaining"] = remaining;
    github["queued"] = Sum(dispatch_metrics, "relay_github_queue_depth");
    boost::json::object redeliveries;
    for (const auto& [k, v] : dispatch_metrics) {
      if (k.starts_with("relay_redelivery_")) redeliveries[k] = v;
    }
    github["redeliveries"] = redeliveries;
  }
  report["github"] = github;
  report["healthy"] = healthy;

  if (ctx.json) {
    PrintJson(report);
    return healthy ? kOk : kUnhealthy;
  }
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
    std::cout << absl::StrFormat("  writes left this minute   %.0f\n", github["writes_left_this_minute"].as_double());
    for (const auto& [k, v] : github["rate_limit_remaining"].as_object()) {
      std::cout << absl::StrFormat("  rate limit remaining %s  %.0f\n", std::string(k), v.as_double());
    }
    std::cout << absl::StrFormat("  writes queued             %.0f\n", github["queued"].as_double());
    for (const auto& [k, v] : github["redeliveries"].as_object()) {
      std::cout << absl::StrFormat("  %-40s %.0f\n", std::string(k), v.as_double());
    }
  }
  if (!healthy) std::cout << "\nNOT HEALTHY: a service is not ready (above)\n";
  return healthy ? kOk : kUnhealthy;
}

}  // namespace relay::relayctl
