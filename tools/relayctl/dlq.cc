// relayctl dlq list|show|redrive: dead letters with their reason and
// source, one decoded, chosen ones sent back to their source topic.
//
// A redrive never loops: the record sent back carries relay-redriven-from
// (the dead letter it came from); if it fails again, the consumer
// dead-letters it with the new reason and that header, and redrive leaves
// such records alone unless --again. Which dead letters were redriven is
// recorded in the dead-letter topic itself, by a marker record appended
// after the redriven records were acknowledged (header relay-redrive-marker:
// the partition:offset list); so a second redrive with the same selection
// sends nothing. Killed between the two, a redrive may be repeated: every
// topic a dead letter comes from is replay-safe for its consumers.
//
// Never past the dispatch ledger's memory: a dead letter of a topic
// relay-dispatch consumes (github.webhooks, github.requests) that is older
// than dispatch.ledger's retention less a day is refused, with the reason:
// the ledger may have forgotten the GitHub writes made for it, and sending
// it back could repeat them. Its age counts from the earlier of the dead
// letter's time and, for a webhook, intake's receipt of it.
#include <iostream>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "relay/base/status.h"
#include "relay/dispatch/ledger.h"
#include "relay/kafka/admin.h"
#include "relay/kafka/cluster_admin.h"
#include "relay/kafka/consumer.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/reader.h"
#include "relay/v1/webhook.pb.h"
#include "relayctl.h"

namespace relay::relayctl {
namespace {

constexpr char kRedriveMarker[] = "relay-redrive-marker";
constexpr const char* kRedrivenFrom = kafka::kRedrivenFromHeader;
// The topics relay-dispatch consumes: their records are acted on only
// within what its ledger remembers.
const std::set<std::string> kLedgerGuarded = {"github.webhooks", "github.requests"};
constexpr char kLedgerTopic[] = "dispatch.ledger";

// dispatch.ledger's retention (ms; 0: forever), from the cluster.
absl::StatusOr<int64_t> LedgerRetention(const Context& ctx) {
  auto admin = kafka::NewKafkaAdmin(ctx.bootstrap, "relayctl");
  if (!admin.ok()) return admin.status();
  auto topic = (*admin)->DescribeTopic(kLedgerTopic, ctx.timeout);
  if (!topic.ok()) {
    return absl::UnavailableError("the retention of " + std::string(kLedgerTopic) +
                                  ", which bounds what may be redriven, is unknown: " +
                                  std::string(topic.status().message()));
  }
  return dispatch::RetentionMs(*topic);
}

absl::StatusOr<std::unique_ptr<kafka::TopicReader>> Reader(const Context& ctx) {
  kafka::ReaderOptions o;
  o.bootstrap = ctx.bootstrap;
  o.client_id = "relayctl";
  o.timeout = std::max<std::chrono::milliseconds>(ctx.timeout, std::chrono::milliseconds(60'000));
  return kafka::NewKafkaTopicReader(o);
}

std::string Header(const kafka::ConsumedRecord& r, std::string_view name) {
  const std::string* h = r.FindHeader(name);
  return h ? *h : "";
}

// The DLQ topics to look at: the one given, or every *.dlq topic.
absl::StatusOr<std::vector<std::string>> DlqTopics(const Context& ctx, const std::vector<std::string>& given) {
  auto admin = kafka::NewClusterAdmin(ctx.bootstrap, ctx.timeout);
  if (!admin.ok()) return admin.status();
  auto topics = (*admin)->Topics();
  if (!topics.ok()) return topics.status();
  std::vector<std::string> out;
  for (const auto& t : given) {
    if (!topics->count(t)) return absl::NotFoundError("no topic " + t);
    if (!t.ends_with(".dlq")) return absl::InvalidArgumentError(t + " is not a dead-letter topic (*.dlq)");
    out.push_back(t);
  }
  if (given.empty()) {
    for (const auto& [t, n] : *topics) {
      if (t.ends_with(".dlq")) out.push_back(t);
    }
  }
  return out;
}

boost::json::object ToJson(const DeadLetter& d, int64_t now) {
  return {{"dlq_topic", d.dlq_topic},
          {"partition", d.partition},
          {"offset", d.offset},
          {"time", FormatTime(d.timestamp_ms)},
          {"age_ms", now - d.timestamp_ms},
          {"key", d.key},
          {"reason", d.reason},
          {"source_topic", d.source_topic},
          {"source_partition", d.source_partition},
          {"source_offset", d.source_offset},
          {"state", d.redriven ? "redriven" : "pending"},
          {"failed_again_after_redrive_of", d.redriven_from},
          {"schema", d.schema}};
}

int List(const Context& ctx, const std::vector<std::string>& args) {
  auto flags = Flags::Parse(args, {"topic", "reason"}, {"pending"});
  if (!flags.ok()) return Fail(kBadInput, std::string(flags.status().message()));
  auto topics = DlqTopics(ctx, flags->All("topic"));
  if (!topics.ok()) return FailStatus(topics.status());
  int64_t now = NowMs();
  boost::json::array rows;
  if (!ctx.json) {
    std::cout << absl::StrFormat("%-24s %-10s %-8s %-9s %-30s %-26s %s\n", "DLQ", "P/OFFSET", "AGE", "STATE",
                                 "SOURCE", "KEY", "REASON");
  }
  for (const auto& t : *topics) {
    auto letters = ReadDeadLetters(ctx, t);
    if (!letters.ok()) return FailStatus(letters.status());
    for (const auto& d : *letters) {
      if (flags->Has("pending") && d.redriven) continue;
      if (flags->Has("reason") && d.reason.find(flags->Get("reason")) == std::string::npos) continue;
      if (ctx.json) {
        rows.push_back(ToJson(d, now));
        continue;
      }
      std::string state = d.redriven ? "redriven" : (d.redriven_from.empty() ? "pending" : "pending*");
      std::cout << absl::StrFormat("%-24s %-10s %-8s %-9s %-30s %-26s %s\n", d.dlq_topic,
                                   absl::StrCat(d.partition, "/", d.offset), FormatAge(now - d.timestamp_ms), state,
                                   absl::StrCat(d.source_topic, "/", d.source_partition, "@", d.source_offset),
                                   d.key.substr(0, 26), d.reason.substr(0, 120));
    }
  }
  if (ctx.json) PrintJson(rows);
  else std::cout << "(pending*: failed again after a redrive; `dlq redrive --again` to send it once more)\n";
  return kOk;
}

int Show(const Context& ctx, const std::vector<std::string>& args) {
  auto flags = Flags::Parse(args, {"partition"}, {});
  if (!flags.ok()) return Fail(kBadInput, std::string(flags.status().message()));
  if (flags->positional().size() != 2) return Fail(kBadInput, "usage: relayctl dlq show DLQ_TOPIC OFFSET [--partition P]");
  const std::string& topic = flags->positional()[0];
  int64_t offset = 0;
  int32_t partition = 0;
  if (!absl::SimpleAtoi(flags->positional()[1], &offset) || offset < 0) {
    return Fail(kBadInput, "offset '" + flags->positional()[1] + "' is not a number");
  }
  if (flags->Has("partition") && !absl::SimpleAtoi(flags->Get("partition"), &partition)) {
    return Fail(kBadInput, "--partition is not a number");
  }
  auto topics = DlqTopics(ctx, {topic});
  if (!topics.ok()) return FailStatus(topics.status());
  auto reader = Reader(ctx);
  if (!reader.ok()) return FailStatus(reader.status());
  auto r = (*reader)->ReadAt(topic, partition, offset);
  if (!r.ok()) return FailStatus(r.status());
  boost::json::object headers;
  for (const auto& h : r->headers) headers[h.key] = h.value;
  boost::json::object out{{"dlq_topic", topic},
                          {"partition", partition},
                          {"offset", offset},
                          {"time", FormatTime(r->timestamp_ms)},
                          {"key", r->key},
                          {"headers", headers},
                          {"value", DecodeValue(r->FindHeader(kafka::kSchemaHeader), r->value)}};
  if (ctx.json) {
    PrintJson(out);
    return kOk;
  }
  std::cout << "dead letter " << topic << " " << partition << "/" << offset << " (" << FormatTime(r->timestamp_ms)
            << ")\nkey: " << r->key << "\n";
  for (const auto& h : r->headers) std::cout << "header " << h.key << ": " << h.value << "\n";
  std::cout << boost::json::serialize(out["value"]) << "\n";
  return kOk;
}

// Takes out of `chosen` the dead letters past the dispatch ledger's memory;
// returns them, each with the reason.
absl::StatusOr<boost::json::array> RefusePastLedgerMemory(const Context& ctx, std::vector<DeadLetter>* chosen) {
  boost::json::array refused;
  std::optional<int64_t> retention;
  int64_t now = NowMs();
  for (auto it = chosen->begin(); it != chosen->end();) {
    if (!kLedgerGuarded.count(it->source_topic)) {
      ++it;
      continue;
    }
    if (!retention) {
      auto r = LedgerRetention(ctx);
      if (!r.ok()) return r.status();
      retention = *r;
    }
    absl::Status within = dispatch::CheckWithinLedgerMemory(it->event_ms, now, *retention);
    if (within.ok()) {
      ++it;
      continue;
    }
    refused.push_back(boost::json::object{{"partition", it->partition}, {"offset", it->offset},
                                          {"reason", std::string(within.message())}});
    it = chosen->erase(it);
  }
  return refused;
}

int Redrive(const Context& ctx, const std::vector<std::string>& args) {
  auto flags = Flags::Parse(args, {"offset", "reason", "key"}, {"all", "again", "dry-run"});
  if (!flags.ok()) return Fail(kBadInput, std::string(flags.status().message()));
  if (flags->positional().size() != 1) {
    return Fail(kBadInput, "usage: relayctl dlq redrive DLQ_TOPIC (--offset N... | --reason TEXT | --key K | --all) "
                           "[--again] [--dry-run]");
  }
  const std::string& topic = flags->positional()[0];
  std::set<int64_t> offsets;
  for (const auto& o : flags->All("offset")) {
    int64_t v;
    if (!absl::SimpleAtoi(o, &v) || v < 0) return Fail(kBadInput, "--offset '" + o + "' is not a number");
    offsets.insert(v);
  }
  bool any = !offsets.empty() || flags->Has("reason") || flags->Has("key");
  if (!any && !flags->Has("all")) return Fail(kBadInput, "say which dead letters: --offset, --reason, --key or --all");
  auto topics = DlqTopics(ctx, {topic});
  if (!topics.ok()) return FailStatus(topics.status());
  auto letters = ReadDeadLetters(ctx, topic);
  if (!letters.ok()) return FailStatus(letters.status());
  std::vector<DeadLetter> chosen;
  int skipped_redriven = 0, skipped_again = 0;
  for (const auto& d : *letters) {
    if (!offsets.empty() && !offsets.count(d.offset)) continue;
    if (flags->Has("reason") && d.reason.find(flags->Get("reason")) == std::string::npos) continue;
    if (flags->Has("key") && d.key != flags->Get("key")) continue;
    if (d.redriven) {
      ++skipped_redriven;
      continue;
    }
    if (!d.redriven_from.empty() && !flags->Has("again")) {
      ++skipped_again;
      continue;
    }
    chosen.push_back(d);
  }
  auto admin = kafka::NewClusterAdmin(ctx.bootstrap, ctx.timeout);
  if (!admin.ok()) return FailStatus(admin.status());
  auto all_topics = (*admin)->Topics();
  if (!all_topics.ok()) return FailStatus(all_topics.status());
  for (const auto& d : chosen) {
    if (!all_topics->count(d.source_topic)) {
      return Fail(kBadInput, "the source topic " + d.source_topic + " of " + topic + " " +
                                 std::to_string(d.partition) + "/" + std::to_string(d.offset) + " does not exist");
    }
  }
  auto past_memory = RefusePastLedgerMemory(ctx, &chosen);
  if (!past_memory.ok()) return FailStatus(past_memory.status());
  const boost::json::array& refused = *past_memory;
  boost::json::object summary{{"dlq_topic", topic},
                              {"selected", chosen.size()},
                              {"skipped_already_redriven", skipped_redriven},
                              {"skipped_failed_again", skipped_again},
                              {"refused_past_ledger_memory", refused},
                              {"dry_run", flags->Has("dry-run")}};
  auto print_refused = [&] {
    for (const auto& r : refused) {
      std::cout << "  refused " << r.at("partition").as_int64() << "/" << r.at("offset").as_int64() << ": "
                << std::string(r.at("reason").as_string()) << "\n";
    }
  };
  // Exit 3 when some were refused: the operator asked for them.
  auto finish = [&]() -> int {
    if (refused.empty()) return kOk;
    return Fail(kRefused, std::to_string(refused.size()) + " dead letter(s) of " + topic +
                              " refused: older than the dispatch ledger remembers (" +
                              std::string(refused[0].at("reason").as_string()) + ")");
  };
  if (flags->Has("dry-run") || chosen.empty()) {
    if (ctx.json) {
      PrintJson(summary);
    } else {
      std::cout << (flags->Has("dry-run") ? "would redrive " : "nothing to redrive: ") << chosen.size()
                << " dead letter(s) of " << topic << " (" << skipped_redriven << " already redriven, " << skipped_again
                << " failed again after a redrive: --again; " << refused.size() << " refused)\n";
      for (const auto& d : chosen) {
        std::cout << "  " << d.partition << "/" << d.offset << " -> " << d.source_topic << "  key " << d.key << "  "
                  << d.reason.substr(0, 100) << "\n";
      }
      print_refused();
    }
    return finish();
  }

  auto reader = Reader(ctx);
  if (!reader.ok()) return FailStatus(reader.status());
  kafka::ProducerOptions po;
  po.bootstrap = ctx.bootstrap;
  po.client_id = "relayctl";
  po.delivery_timeout = std::max<std::chrono::milliseconds>(ctx.timeout, std::chrono::milliseconds(30'000));
  auto producer = kafka::NewKafkaProducer(po, nullptr);
  if (!producer.ok()) return FailStatus(producer.status());
  Progress progress(ctx, "redrive", static_cast<int64_t>(chosen.size()));
  std::map<int32_t, std::vector<std::string>> done;  // DLQ partition -> "p:o" redriven
  int64_t n = 0;
  // The markers of what was sent, also when a later send fails: those are
  // not sent again by the next redrive.
  auto mark = [&]() -> absl::Status {
    for (const auto& [partition, list] : done) {
      kafka::Record marker{topic, "relay-redrive", "", {{kRedriveMarker, absl::StrJoin(list, ",")}}, partition};
      RELAY_RETURN_IF_ERROR(kafka::SendAndWait(**producer, std::move(marker)));
    }
    return absl::OkStatus();
  };
  for (const auto& d : chosen) {
    auto r = (*reader)->ReadAt(topic, d.partition, d.offset);
    if (!r.ok()) return FailStatus(r.status());
    kafka::Record out{d.source_topic, r->key, r->value, {}};
    for (const auto& h : r->headers) {
      if (h.key.starts_with("relay-dlq-") || h.key == kRedrivenFrom) continue;
      out.headers.push_back(h);
    }
    out.headers.push_back({kRedrivenFrom, absl::StrCat(topic, "/", d.partition, "/", d.offset)});
    if (d.source_partition >= 0 && d.source_partition < all_topics->at(d.source_topic)) {
      out.partition = d.source_partition;
    }
    if (auto s = kafka::SendAndWait(**producer, std::move(out)); !s.ok()) {
      progress.Finish();
      (void)mark();
      return Fail(kFailed, "redrive of " + topic + " " + std::to_string(d.partition) + "/" + std::to_string(d.offset) +
                               " to " + d.source_topic + " failed: " + std::string(s.message()) + " (" +
                               std::to_string(n) + " sent before it)");
    }
    done[d.partition].push_back(absl::StrCat(d.partition, ":", d.offset));
    progress.Update(++n);
  }
  progress.Finish();
  if (auto s = mark(); !s.ok()) {
    return Fail(kFailed, "redriven " + std::to_string(n) + " dead letters, but the marker that records it failed: " +
                             std::string(s.message()) + " (a second redrive would send them again)");
  }
  summary["redriven"] = n;
  if (ctx.json) {
    PrintJson(summary);
  } else {
    std::cout << "redriven " << n << " dead letter(s) of " << topic << " to their source topics\n";
    print_refused();
  }
  return finish();
}

}  // namespace

absl::StatusOr<std::vector<DeadLetter>> ReadDeadLetters(const Context& ctx, const std::string& dlq_topic) {
  auto reader = Reader(ctx);
  if (!reader.ok()) return reader.status();
  std::vector<DeadLetter> out;
  std::set<std::pair<int32_t, int64_t>> redriven;
  std::string default_source = dlq_topic.substr(0, dlq_topic.size() - 4);
  auto read = (*reader)->ReadToEnd(dlq_topic, {}, [&](const kafka::ConsumedRecord& r) {
    if (const std::string* m = r.FindHeader(kRedriveMarker)) {
      for (absl::string_view item : absl::StrSplit(*m, ',', absl::SkipEmpty())) {
        std::pair<absl::string_view, absl::string_view> po = absl::StrSplit(item, ':');
        int32_t p;
        int64_t o;
        if (absl::SimpleAtoi(po.first, &p) && absl::SimpleAtoi(po.second, &o)) redriven.insert({p, o});
      }
      return absl::OkStatus();
    }
    DeadLetter d;
    d.dlq_topic = dlq_topic;
    d.partition = r.partition;
    d.offset = r.offset;
    d.timestamp_ms = r.timestamp_ms;
    d.event_ms = r.timestamp_ms;
    // A webhook's own time: intake's receipt, older than its dead letter.
    if (const std::string* schema = r.FindHeader(kafka::kSchemaHeader); schema && *schema == "relay.v1.WebhookRecord") {
      v1::WebhookRecord webhook;
      if (webhook.ParseFromString(r.value) && webhook.received_at_unix_ms() > 0) {
        d.event_ms = std::min(d.event_ms, webhook.received_at_unix_ms());
      }
    }
    d.key = r.key;
    d.reason = Header(r, kafka::kDlqReasonHeader);
    d.source_topic = Header(r, kafka::kDlqTopicHeader);
    if (d.source_topic.empty()) d.source_topic = default_source;
    if (!absl::SimpleAtoi(Header(r, kafka::kDlqPartitionHeader), &d.source_partition)) d.source_partition = -1;
    if (!absl::SimpleAtoi(Header(r, kafka::kDlqOffsetHeader), &d.source_offset)) d.source_offset = -1;
    d.redriven_from = Header(r, kRedrivenFrom);
    d.schema = Header(r, kafka::kSchemaHeader);
    out.push_back(std::move(d));
    return absl::OkStatus();
  });
  if (!read.ok()) return read.status();
  for (auto& d : out) d.redriven = redriven.count({d.partition, d.offset}) > 0;
  return out;
}

int Dlq(const Context& ctx, const std::vector<std::string>& args) {
  if (args.empty()) return Fail(kBadInput, "usage: relayctl dlq list|show|redrive ... (relayctl dlq --help)");
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "list") return List(ctx, rest);
  if (args[0] == "show") return Show(ctx, rest);
  if (args[0] == "redrive") return Redrive(ctx, rest);
  return Fail(kBadInput, "unknown dlq command '" + args[0] + "' (list, show, redrive)");
}

}  // namespace relay::relayctl
