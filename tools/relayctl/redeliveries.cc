// relayctl redeliveries: the GitHub redelivery reconciler's state (its log,
// github.redeliveries: the last checkpoint, the guids it asked GitHub to
// deliver again and the answers), and `run`: ask it to scan now.
#include <iostream>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/reader.h"
#include "relay/v1/github.pb.h"
#include "relayctl.h"

namespace relay::relayctl {
namespace {

namespace json = boost::json;

struct State {
  std::optional<v1::RedeliveryCheckpoint> checkpoint;
  std::vector<v1::RedeliveryRequested> requested;
  std::map<std::string, v1::RedeliveryResult> results;
  int64_t scans_asked = 0;
};

absl::StatusOr<State> ReadState(const Context& ctx, const std::string& topic) {
  kafka::ReaderOptions o;
  o.bootstrap = ctx.bootstrap;
  o.client_id = "relayctl";
  auto reader = kafka::NewKafkaTopicReader(o);
  if (!reader.ok()) return reader.status();
  if (auto n = (*reader)->Partitions(topic); !n.ok()) {
    if (n.status().code() != absl::StatusCode::kNotFound) return n.status();
    return absl::NotFoundError("no topic " + topic + " (the redelivery reconciler's log)");
  }
  State st;
  auto read = (*reader)->ReadToEnd(topic, {}, [&](const kafka::ConsumedRecord& r) {
    v1::RedeliveryRecord rec;
    if (!rec.ParseFromString(r.value)) return absl::OkStatus();
    switch (rec.kind_case()) {
      case v1::RedeliveryRecord::kCheckpoint: st.checkpoint = rec.checkpoint(); break;
      case v1::RedeliveryRecord::kRequested: st.requested.push_back(rec.requested()); break;
      case v1::RedeliveryRecord::kResult: st.results[rec.result().guid()] = rec.result(); break;
      case v1::RedeliveryRecord::kScan: ++st.scans_asked; break;
      default: break;
    }
    return absl::OkStatus();
  });
  if (!read.ok()) return read.status();
  return st;
}

json::object CheckpointJson(const v1::RedeliveryCheckpoint& c) {
  return {{"scanned_at", FormatTime(c.scanned_at_unix_ms())},
          {"listed_since", FormatTime(c.listed_since_unix_ms())},
          {"resume_from", FormatTime(c.resume_from_unix_ms())},
          {"attempts", c.attempts()},
          {"guids", c.guids()},
          {"failed", c.failed()},
          {"not_recorded", c.not_recorded()},
          {"requested", c.requested()},
          {"requested_before", c.requested_before()},
          {"asked_again", c.asked_again()},
          {"pages", c.pages()},
          {"rounds", c.rounds()},
          {"pages_failed", c.resumed()},
          {"served_scan_end", c.served_scan_end()}};
}

int Show(const Context& ctx, const std::string& topic, int limit) {
  auto st = ReadState(ctx, topic);
  if (!st.ok()) return FailStatus(st.status());
  std::map<std::string, int64_t> by_reason, by_result;
  json::array recent;
  for (size_t i = 0; i < st->requested.size(); ++i) {
    const auto& r = st->requested[i];
    ++by_reason[r.reason()];
    auto res = st->results.find(r.guid());
    std::string result = res == st->results.end() ? "pending" : res->second.result();
    ++by_result[result];
    if (i + limit >= st->requested.size()) {
      recent.push_back(json::object{{"guid", r.guid()},
                                    {"delivery_id", r.delivery_id()},
                                    {"event", r.event()},
                                    {"action", r.action()},
                                    {"reason", r.reason()},
                                    {"delivered_at", FormatTime(r.delivered_at_unix_ms())},
                                    {"requested_at", FormatTime(r.at_unix_ms())},
                                    {"result", result},
                                    {"http_status", res == st->results.end() ? 0 : res->second.http_status()}});
    }
  }
  json::object reasons, results;
  for (const auto& [k, v] : by_reason) reasons[k] = v;
  for (const auto& [k, v] : by_result) results[k] = v;
  json::object out{{"topic", topic},
                   {"requested", static_cast<int64_t>(st->requested.size())},
                   {"by_reason", reasons},
                   {"by_result", results},
                   {"scans_asked", st->scans_asked},
                   {"recent", recent}};
  if (st->checkpoint) out["checkpoint"] = CheckpointJson(*st->checkpoint);
  if (ctx.json) {
    PrintJson(out);
    return kOk;
  }
  if (st->checkpoint) {
    const auto& c = *st->checkpoint;
    std::cout << "last scan " << FormatTime(c.scanned_at_unix_ms()) << " (" << FormatAge(NowMs() - c.scanned_at_unix_ms())
              << " ago): " << c.attempts() << " attempts of " << c.guids() << " guids listed since "
              << FormatTime(c.listed_since_unix_ms()) << " in " << c.pages() << " pages; " << c.failed() << " failed, "
              << c.not_recorded() << " never recorded by intake, " << c.requested() << " requested, "
              << c.requested_before() << " left alone (requested before)\n"
              << "next scan lists back to " << FormatTime(c.resume_from_unix_ms()) << "\n";
  } else {
    std::cout << "no scan yet\n";
  }
  std::cout << "redeliveries requested: " << st->requested.size();
  for (const auto& [k, v] : by_reason) std::cout << "  " << k << " " << v;
  std::cout << "   answers:";
  for (const auto& [k, v] : by_result) std::cout << "  " << k << " " << v;
  std::cout << "\n\n" << absl::StrFormat("%-38s %-14s %-22s %-13s %-20s %s\n", "GUID", "REASON", "EVENT", "DELIVERY", "REQUESTED", "RESULT");
  for (const auto& r : recent) {
    const auto& o = r.as_object();
    std::cout << absl::StrFormat("%-38s %-14s %-22s %-13d %-20s %s\n", std::string(o.at("guid").as_string()),
                                 std::string(o.at("reason").as_string()),
                                 std::string(o.at("event").as_string()) + (o.at("action").as_string().empty() ? "" : "." + std::string(o.at("action").as_string())),
                                 o.at("delivery_id").as_int64(), std::string(o.at("requested_at").as_string()),
                                 std::string(o.at("result").as_string()));
  }
  return kOk;
}

// One line for a checkpoint: what its listing covered.
std::string CheckpointLine(const v1::RedeliveryCheckpoint& c) {
  return absl::StrCat("scanned: ", c.attempts(), " attempts of ", c.guids(), " guids since ",
                      FormatTime(c.listed_since_unix_ms()), "; ", c.failed(), " failed, ", c.not_recorded(),
                      " never recorded, ", c.requested(), " redeliveries requested (", c.asked_again(),
                      " asked again: recorded before, never sent), ", c.requested_before(), " requested before");
}

int Run(const Context& ctx, const std::string& topic, const Flags& flags) {
  int64_t since = NowMs() - 72LL * 3'600'000;
  if (flags.Has("since")) {
    auto t = ParseTime(flags.Get("since"));
    if (!t.ok()) return FailStatus(t.status());
    if (*t > NowMs()) return Fail(kBadInput, "--since is in the future");
    since = *t;
  }
  absl::Duration timeout = absl::Minutes(5);
  if (flags.Has("wait-for") && (!absl::ParseDuration(flags.Get("wait-for"), &timeout) || timeout <= absl::ZeroDuration())) {
    return Fail(kBadInput, "--wait-for must be a positive duration (30s, 5m)");
  }
  auto before = ReadState(ctx, topic);
  if (!before.ok()) return FailStatus(before.status());
  v1::RedeliveryRecord rec;
  int64_t at = NowMs();
  rec.mutable_scan()->set_since_unix_ms(since);
  rec.mutable_scan()->set_at_unix_ms(at);
  const char* user = std::getenv("USER");
  rec.mutable_scan()->set_by(std::string("relayctl ") + (user ? user : ""));
  kafka::ProducerOptions po;
  po.bootstrap = ctx.bootstrap;
  po.client_id = "relayctl";
  auto producer = kafka::NewKafkaProducer(po, nullptr);
  if (!producer.ok()) return FailStatus(producer.status());
  auto sent = kafka::SendAndWaitForOffset(**producer, kafka::MessageRecord(topic, "scan", rec));
  if (!sent.ok()) return Fail(kFailed, "the scan request was not written: " + std::string(sent.status().message()));
  int64_t offset = *sent;
  if (!flags.Has("wait")) {
    if (ctx.json) PrintJson(json::object{{"asked", true}, {"since", FormatTime(since)}, {"offset", offset}});
    else std::cout << "asked relay-dispatch to scan deliveries since " << FormatTime(since) << "\n";
    return kOk;
  }
  if (offset < 0) return Fail(kFailed, "the broker did not say where the scan request went: cannot wait for it");
  // Until a checkpoint says a complete listing served this request (it
  // listed back to its since). A newer checkpoint that did not (a listing
  // under way when the request came) is not enough.
  auto deadline = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(timeout);
  std::optional<v1::RedeliveryCheckpoint> last;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto st = ReadState(ctx, topic);
    if (!st.ok()) return FailStatus(st.status());
    if (!st->checkpoint) continue;
    last = st->checkpoint;
    if (st->checkpoint->served_scan_end() <= offset) continue;
    const auto& c = *st->checkpoint;
    if (ctx.json) {
      json::object out = CheckpointJson(c);
      out["covered"] = true;
      out["since"] = FormatTime(since);
      PrintJson(out);
    } else {
      std::cout << CheckpointLine(c) << "\n";
    }
    return kOk;
  }
  std::string why = absl::StrCat("the asked window (since ", FormatTime(since), ") was not covered within ",
                                 absl::FormatDuration(timeout), ": ");
  if (last && last->scanned_at_unix_ms() >= at) {
    absl::StrAppend(&why, "the last complete listing (", FormatTime(last->scanned_at_unix_ms()), ") went back to ",
                    FormatTime(last->listed_since_unix_ms()), " without serving this request; it stays asked for");
  } else {
    absl::StrAppend(&why, "no listing completed since the request (is relay-dispatch running? its log says why a "
                          "scan failed); it stays asked for");
  }
  if (ctx.json) {
    json::object out{{"covered", false}, {"since", FormatTime(since)}, {"error", why}};
    if (last) out["checkpoint"] = CheckpointJson(*last);
    PrintJson(out);
  }
  return Fail(kFailed, why);
}

}  // namespace

int Redeliveries(const Context& ctx, const std::vector<std::string>& args) {
  auto flags = Flags::Parse(args, {"since", "topic", "limit", "wait-for"}, {"wait"});
  if (!flags.ok()) return Fail(kBadInput, std::string(flags.status().message()));
  std::string topic = flags->Get("topic", "github.redeliveries");
  const auto& pos = flags->positional();
  if (pos.empty()) {
    int limit = 20;
    if (flags->Has("limit")) limit = std::max(0, std::atoi(flags->Get("limit").c_str()));
    return Show(ctx, topic, limit);
  }
  if (pos.size() == 1 && pos[0] == "run") return Run(ctx, topic, *flags);
  return Fail(kBadInput, "usage: relayctl redeliveries [--limit N] | relayctl redeliveries run [--since T] [--wait [--wait-for D]]");
}

}  // namespace relay::relayctl
