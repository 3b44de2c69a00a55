// relayctl replay: records of a topic delivered again, by offset range,
// time range or key, into the same topic or another; or a stopped consumer
// group moved to a time.
//
// Exactly once, also across a kill: the copies are written in Kafka
// transactions that also commit the replay's own progress (the source
// offsets, as the consumer group relayctl-replay.<id>), so a transaction
// either carries records and the progress past them or neither. Every
// relay consumer reads committed records only. The checkpoint file holds
// what was asked (topics, keys, each partition's [start, end) fixed when
// the replay began); running the same replay with it again continues from
// the committed progress, with no gap and no repeat.
#include <librdkafka/rdkafka.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "relay/base/status.h"
#include "relay/kafka/cluster_admin.h"
#include "relay/kafka/security.h"
#include "relayctl.h"

namespace relay::relayctl {
namespace {

namespace json = boost::json;
constexpr const char* kReplayedFrom = kafka::kReplayedFromHeader;
constexpr int kBatchRecords = 20000;

std::atomic<bool> g_interrupted{false};
extern "C" void OnSignal(int) { g_interrupted = true; }

struct Plan {
  std::string id, source, dest;
  std::vector<std::string> keys;  // empty: every record
  std::map<int32_t, std::pair<int64_t, int64_t>> ranges;  // partition -> [start, end)
  bool done = false;
  int64_t total() const {
    int64_t n = 0;
    for (const auto& [p, r] : ranges) n += r.second - r.first;
    return n;
  }
  std::string group() const { return "relayctl-replay." + id; }
};

json::value PlanJson(const Plan& p) {
  json::object ranges;
  for (const auto& [part, r] : p.ranges) ranges[std::to_string(part)] = json::array{r.first, r.second};
  json::array keys;
  for (const auto& k : p.keys) keys.push_back(json::value(k));
  return json::object{{"id", p.id}, {"source", p.source}, {"dest", p.dest}, {"keys", keys},
                      {"ranges", ranges}, {"done", p.done}};
}

absl::Status SavePlan(const std::string& path, const Plan& p) {
  std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << json::serialize(PlanJson(p)) << "\n";
    if (!out.good()) return absl::UnavailableError("cannot write the checkpoint " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::UnavailableError("cannot write the checkpoint " + path + ": " + ec.message());
  return absl::OkStatus();
}

absl::StatusOr<Plan> LoadPlan(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  boost::system::error_code ec;
  json::value v = json::parse(ss.str(), ec);
  if (ec || !v.is_object()) return absl::InvalidArgumentError("checkpoint " + path + " is not a replay checkpoint");
  try {
    Plan p;
    const auto& o = v.as_object();
    p.id = json::value_to<std::string>(o.at("id"));
    p.source = json::value_to<std::string>(o.at("source"));
    p.dest = json::value_to<std::string>(o.at("dest"));
    for (const auto& k : o.at("keys").as_array()) p.keys.push_back(json::value_to<std::string>(k));
    for (const auto& [part, r] : o.at("ranges").as_object()) {
      p.ranges[std::stoi(std::string(part))] = {r.as_array().at(0).to_number<int64_t>(),
                                                r.as_array().at(1).to_number<int64_t>()};
    }
    p.done = o.at("done").as_bool();
    return p;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError("checkpoint " + path + " is not a replay checkpoint: " + e.what());
  }
}

std::string DefaultCheckpoint(const std::string& id) {
  const char* state = std::getenv("XDG_STATE_HOME");
  const char* home = std::getenv("HOME");
  std::string dir = state ? std::string(state) : std::string(home ? home : "/tmp") + "/.local/state";
  return dir + "/relayctl/replay-" + id + ".json";
}

std::string NewId(const std::string& source) {
  std::random_device rd;
  return absl::StrFormat("%s-%d-%04x", source, NowMs() / 1000, rd() & 0xffff);
}

bool KeyWanted(const Plan& p, std::string_view key) {
  if (p.keys.empty()) return true;
  for (const auto& k : p.keys) {
    if (k == key) return true;
  }
  return false;
}

rd_kafka_conf_t* Conf(const Context& ctx, std::vector<std::pair<std::string, std::string>> props) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  props.insert(props.begin(), {{"bootstrap.servers", ctx.bootstrap}, {"client.id", "relayctl"}, {"log_level", "3"}});
  auto security = kafka::SecurityProperties();
  props.insert(props.begin() + 3, security.begin(), security.end());
  for (const auto& [k, v] : props) rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err);
  return conf;
}

// Reads the plan's ranges from `from` (partition -> next offset) and hands
// over each record in range; stops when every partition reached its end,
// on interrupt, or when `on_record` says so. Returns the positions reached.
class RangeReader {
 public:
  RangeReader(const Context& ctx, const Plan& plan) : plan_(plan) {
    char err[512];
    rd_kafka_conf_t* conf = Conf(ctx, {{"group.id", plan.group()},
                                       {"enable.auto.commit", "false"},
                                       {"enable.auto.offset.store", "false"},
                                       {"enable.partition.eof", "true"},
                                       {"isolation.level", "read_committed"},
                                       {"auto.offset.reset", "earliest"},
                                       {"fetch.wait.max.ms", "50"},
                                       {"fetch.message.max.bytes", std::to_string(32 * 1024 * 1024)}});
    rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk_) error_ = err;
    else rd_kafka_poll_set_consumer(rk_);
  }
  ~RangeReader() {
    if (rk_) {
      rd_kafka_assign(rk_, nullptr);
      rd_kafka_destroy(rk_);
    }
  }
  const std::string& error() const { return error_; }
  rd_kafka_t* handle() { return rk_; }

  // Assigns every unfinished partition at its position.
  absl::Status Start(std::map<int32_t, int64_t> positions) {
    positions_ = std::move(positions);
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(static_cast<int>(positions_.size()));
    for (const auto& [p, next] : positions_) {
      if (next >= plan_.ranges.at(p).second) continue;
      rd_kafka_topic_partition_list_add(list, plan_.source.c_str(), p)->offset = next;
      ++open_;
    }
    rd_kafka_resp_err_t e = rd_kafka_assign(rk_, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (e) return absl::UnavailableError(std::string("assign: ") + rd_kafka_err2str(e));
    return absl::OkStatus();
  }
  bool finished() const { return open_ == 0; }
  const std::map<int32_t, int64_t>& positions() const { return positions_; }

  // Polls once (up to `wait`); a message in range is returned (the caller
  // destroys it), anything else is handled here.
  absl::StatusOr<rd_kafka_message_t*> Next(std::chrono::milliseconds wait) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, static_cast<int>(wait.count()));
    if (!m) return nullptr;
    int32_t p = m->partition;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      // At the end of what can be read. A read_committed consumer stops at
      // the last stable offset, which an open transaction keeps below the
      // high watermark the range ends at: only past the range is it done.
      auto r = plan_.ranges.find(p);
      if (r != plan_.ranges.end() && m->offset >= r->second.second) Close(p);
      rd_kafka_message_destroy(m);
      return nullptr;
    }
    if (m->err) {
      std::string why = rd_kafka_message_errstr(m);
      bool fatal = m->err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC || m->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
                   m->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED;
      rd_kafka_message_destroy(m);
      if (fatal) return absl::UnavailableError("reading " + plan_.source + ": " + why);
      return nullptr;
    }
    auto it = plan_.ranges.find(p);
    if (it == plan_.ranges.end() || !positions_.count(p) || closed_.count(p)) {
      rd_kafka_message_destroy(m);
      return nullptr;
    }
    if (m->offset >= it->second.second) {
      Close(p);
      rd_kafka_message_destroy(m);
      return nullptr;
    }
    positions_[p] = m->offset + 1;
    if (positions_[p] >= it->second.second) Close(p);
    return m;
  }

 private:
  // Partition `p` has nothing more of its range to give: it is done.
  void Close(int32_t p) {
    auto it = positions_.find(p);
    if (it == positions_.end() || closed_.count(p)) return;
    it->second = std::max(it->second, plan_.ranges.at(p).second);
    closed_.insert(p);
    --open_;
  }

  const Plan& plan_;
  rd_kafka_t* rk_ = nullptr;
  std::string error_;
  std::map<int32_t, int64_t> positions_;
  std::set<int32_t> closed_;
  int open_ = 0;
};

absl::StatusOr<std::map<int32_t, int64_t>> Offsets(kafka::ClusterAdmin& admin, const std::string& topic,
                                                   const std::string& time, bool high) {
  if (!time.empty()) {
    auto t = ParseTime(time);
    if (!t.ok()) return t.status();
    return admin.OffsetsForTime(topic, *t);
  }
  auto o = admin.Offsets(topic);
  if (!o.ok()) return o.status();
  std::map<int32_t, int64_t> out;
  for (const auto& [p, po] : *o) out[p] = high ? po.high : po.low;
  return out;
}

int ResetGroup(const Context& ctx, const Flags& flags) {
  const std::string group = flags.Get("group");
  if (!flags.Has("reset-to")) return Fail(kBadInput, "--group needs --reset-to TIME");
  auto at = ParseTime(flags.Get("reset-to"));
  if (!at.ok()) return FailStatus(at.status());
  if (*at > NowMs()) return Fail(kBadInput, "--reset-to is in the future");
  auto admin = kafka::NewClusterAdmin(ctx.bootstrap, ctx.timeout);
  if (!admin.ok()) return FailStatus(admin.status());
  auto described = (*admin)->DescribeGroup(group);
  if (!described.ok()) return FailStatus(described.status());
  auto committed = (*admin)->CommittedOffsets(group);
  if (!committed.ok()) return FailStatus(committed.status());
  if (described->state == "Dead" || committed->empty()) return Fail(kBadInput, "no consumer group " + group);
  std::set<std::string> topics;
  for (const auto& [tp, o] : *committed) topics.insert(tp.topic);
  for (const auto& t : flags.All("topic")) {
    if (!topics.count(t)) return Fail(kBadInput, "group " + group + " has no offsets on topic " + t);
  }
  if (flags.Has("topic")) {
    auto named = flags.All("topic");
    topics = {named.begin(), named.end()};
  }
  for (const auto& t : topics) {
    if (!ReplaySafeTopics().count(t) && !flags.Has("force")) {
      return Fail(kRefused, "the consumers of " + t +
                                " are not declared replay-safe (deploy/kafka/replay-safe.txt); --force to reset anyway");
    }
  }
  std::map<kafka::TopicPartition, int64_t> target;
  int64_t records = 0;
  for (const auto& t : topics) {
    auto offsets = (*admin)->OffsetsForTime(t, *at);
    if (!offsets.ok()) return FailStatus(offsets.status());
    for (const auto& [p, o] : *offsets) {
      auto cur = committed->find({t, p});
      // Never forward: a group behind the time keeps its offset (moving it
      // would skip records it has not read).
      int64_t to = cur != committed->end() ? std::min(cur->second, o) : o;
      target[{t, p}] = to;
      if (cur != committed->end() && cur->second > to) records += cur->second - to;
    }
  }
  json::object summary{{"group", group}, {"reset_to", FormatTime(*at)}, {"records_read_again", records},
                       {"dry_run", flags.Has("dry-run")}};
  if (!flags.Has("dry-run")) {
    if (described->members > 0) {
      return Fail(kRefused, "group " + group + " has " + std::to_string(described->members) +
                                " members: stop its consumers first (the broker refuses offsets of a live group)");
    }
    if (auto s = (*admin)->SetCommittedOffsets(group, target); !s.ok()) return FailStatus(s);
  }
  if (ctx.json) PrintJson(summary);
  else
    std::cout << (flags.Has("dry-run") ? "would reset" : "reset") << " group " << group << " to "
              << FormatTime(*at) << ": " << records << " records will be read again\n";
  return kOk;
}

// The range flags' offsets (-1 when not given), checked against each other
// and against the time flags.
absl::Status ParseRangeFlags(const Flags& flags, int64_t& from_offset, int64_t& to_offset) {
  if (flags.Has("from-offset") && flags.Has("from-time")) {
    return absl::InvalidArgumentError("--from-offset or --from-time, not both");
  }
  if (flags.Has("to-offset") && flags.Has("to-time")) return absl::InvalidArgumentError("--to-offset or --to-time, not both");
  if (flags.Has("from-time") && flags.Has("to-time")) {
    auto from = ParseTime(flags.Get("from-time"));
    auto to = ParseTime(flags.Get("to-time"));
    if (!from.ok()) return from.status();
    if (!to.ok()) return to.status();
    if (*from > *to) {
      return absl::InvalidArgumentError("the time range is reversed: --from-time " + FormatTime(*from) +
                                        " is after --to-time " + FormatTime(*to));
    }
  }
  from_offset = -1;
  to_offset = -1;
  if (flags.Has("from-offset") && (!absl::SimpleAtoi(flags.Get("from-offset"), &from_offset) || from_offset < 0)) {
    return absl::InvalidArgumentError("--from-offset must be an offset (0 or more)");
  }
  if (flags.Has("to-offset") && (!absl::SimpleAtoi(flags.Get("to-offset"), &to_offset) || to_offset < 0)) {
    return absl::InvalidArgumentError("--to-offset must be an offset (0 or more)");
  }
  if (from_offset >= 0 && to_offset >= 0 && from_offset > to_offset) {
    return absl::InvalidArgumentError("the offset range is reversed: --from-offset " + std::to_string(from_offset) +
                                      " is after --to-offset " + std::to_string(to_offset));
  }
  return absl::OkStatus();
}

// A new replay's plan from the flags: source, destination, keys, and each
// chosen partition's [start, end), fixed now.
absl::StatusOr<Plan> NewPlan(kafka::ClusterAdmin& admin, const std::map<std::string, int>& topics, const Flags& flags) {
  if (flags.positional().size() != 1) {
    return absl::InvalidArgumentError(
        "usage: relayctl replay TOPIC [--to TOPIC] [range and key options] (relayctl replay --help)");
  }
  Plan plan;
  plan.source = flags.positional()[0];
  plan.dest = flags.Get("to", plan.source);
  plan.keys = flags.All("key");
  int64_t from_offset, to_offset;
  RELAY_RETURN_IF_ERROR(ParseRangeFlags(flags, from_offset, to_offset));
  if (!topics.count(plan.source)) return absl::InvalidArgumentError("no topic " + plan.source);
  if (!topics.count(plan.dest)) return absl::InvalidArgumentError("no topic " + plan.dest + " (--to)");
  if (plan.source.starts_with("__") || plan.dest.starts_with("__")) {
    return absl::InvalidArgumentError("internal topics are not replayed");
  }
  RELAY_ASSIGN_OR_RETURN(auto starts, Offsets(admin, plan.source, flags.Get("from-time"), false));
  RELAY_ASSIGN_OR_RETURN(auto ends, Offsets(admin, plan.source, flags.Get("to-time"), true));
  RELAY_ASSIGN_OR_RETURN(auto bounds, admin.Offsets(plan.source));
  std::set<int32_t> wanted;
  for (const auto& p : flags.All("partition")) {
    int32_t v;
    if (!absl::SimpleAtoi(p, &v) || !bounds.count(v)) {
      return absl::InvalidArgumentError("topic " + plan.source + " has no partition " + p + " (it has " +
                                        std::to_string(bounds.size()) + ")");
    }
    wanted.insert(v);
  }
  for (const auto& [p, po] : bounds) {
    if (!wanted.empty() && !wanted.count(p)) continue;
    int64_t start = std::max(po.low, from_offset >= 0 ? from_offset : starts[p]);
    int64_t end = std::min(po.high, to_offset >= 0 ? to_offset : ends[p]);
    plan.ranges[p] = {start, std::max(start, end)};
  }
  plan.id = NewId(plan.source);
  return plan;
}

// The plan of an interrupted replay, from its checkpoint; a topic named
// on the command line must be the one it replays.
absl::StatusOr<Plan> ResumedPlan(const std::string& checkpoint, const Flags& flags) {
  RELAY_ASSIGN_OR_RETURN(Plan plan, LoadPlan(checkpoint));
  if (!flags.positional().empty() && flags.positional()[0] != plan.source) {
    return absl::InvalidArgumentError("checkpoint " + checkpoint + " is a replay of " + plan.source + ", not " +
                                      flags.positional()[0]);
  }
  return plan;
}

// --dry-run: reads the range, counts and samples, moves nothing.
int DryRun(const Context& ctx, const Plan& plan, bool safe) {
  const int64_t total = plan.total();
  RangeReader reader(ctx, plan);
  if (!reader.error().empty()) return Fail(kFailed, reader.error());
  std::map<int32_t, int64_t> from;
  for (const auto& [p, r] : plan.ranges) from[p] = r.first;
  if (auto s = reader.Start(from); !s.ok()) return FailStatus(s);
  int64_t read = 0, matching = 0;
  json::array samples;
  Progress progress(ctx, "dry run", total);
  auto deadline = std::chrono::steady_clock::now() + std::max(ctx.timeout, std::chrono::milliseconds(60'000));
  while (!reader.finished() && !g_interrupted) {
    auto m = reader.Next(std::chrono::milliseconds(200));
    if (!m.ok()) return FailStatus(m.status());
    if (!*m) {
      if (std::chrono::steady_clock::now() > deadline) return Fail(kFailed, "the range was not read in time");
      continue;
    }
    deadline = std::chrono::steady_clock::now() + std::max(ctx.timeout, std::chrono::milliseconds(60'000));
    absl::Cleanup free_m = [m = *m] { rd_kafka_message_destroy(m); };
    ++read;
    std::string_view key((*m)->key ? static_cast<const char*>((*m)->key) : "", (*m)->key_len);
    if (KeyWanted(plan, key)) {
      ++matching;
      if (samples.size() < 5) {
        samples.push_back(json::object{{"partition", (*m)->partition},
                                       {"offset", (*m)->offset},
                                       {"time", FormatTime(rd_kafka_message_timestamp(*m, nullptr))},
                                       {"key", std::string(key)}});
      }
    }
    progress.Update(read);
  }
  progress.Finish();
  json::object ranges = PlanJson(plan).as_object()["ranges"].as_object();
  json::object out{{"source", plan.source}, {"dest", plan.dest}, {"records_in_range", total},
                   {"records_read", read}, {"would_replay", matching}, {"ranges", ranges},
                   {"samples", samples}, {"dest_replay_safe", safe}, {"dry_run", true}};
  if (ctx.json) {
    PrintJson(out);
  } else {
    std::cout << "dry run: would replay " << matching << " of " << read << " records of " << plan.source << " into "
              << plan.dest << (safe ? "" : " (NOT declared replay-safe: needs --force)") << "\n";
    for (const auto& [p, r] : plan.ranges) std::cout << "  partition " << p << ": [" << r.first << ", " << r.second << ")\n";
    for (const auto& s : samples) std::cout << "  sample " << json::serialize(s) << "\n";
  }
  return kOk;
}

// The replay's producer, flushed and destroyed when released.
struct ProducerCloser {
  void operator()(rd_kafka_t* producer) const {
    rd_kafka_flush(producer, 10'000);
    rd_kafka_destroy(producer);
  }
};
using Producer = std::unique_ptr<rd_kafka_t, ProducerCloser>;

// The transactional producer of the plan (its transactional.id is the
// replay group), with its transactions initialised: a transaction a killed
// run left completing is finished first.
absl::StatusOr<Producer> OpenProducer(const Context& ctx, const Plan& plan, int timeout_ms) {
  char err[512];
  rd_kafka_conf_t* pconf = Conf(ctx, {{"transactional.id", plan.group()},
                                      {"enable.idempotence", "true"},
                                      {"acks", "all"},
                                      {"linger.ms", "5"},
                                      {"compression.type", "lz4"},
                                      {"message.max.bytes", std::to_string(32 * 1024 * 1024)},
                                      {"transaction.timeout.ms", "60000"}});
  Producer producer(rd_kafka_new(RD_KAFKA_PRODUCER, pconf, err, sizeof err));
  if (!producer) return absl::UnavailableError(std::string("producer: ") + err);
  if (rd_kafka_error_t* e = rd_kafka_init_transactions(producer.get(), timeout_ms)) {
    std::string why = rd_kafka_error_string(e);
    rd_kafka_error_destroy(e);
    return absl::UnavailableError("cannot start the replay's transactions: " + why);
  }
  return producer;
}

// Where the replay stands: the replay group's committed offsets (written in
// the same transactions as the copies), else each range's start. Read after
// init_transactions, which waits for a transaction a killed run left
// completing (its offsets are then the ones read).
absl::StatusOr<std::map<int32_t, int64_t>> StartPositions(kafka::ClusterAdmin& admin, const Plan& plan) {
  RELAY_ASSIGN_OR_RETURN(auto committed, admin.CommittedOffsets(plan.group()));
  std::map<int32_t, int64_t> positions;
  for (const auto& [p, r] : plan.ranges) {
    auto it = committed.find({plan.source, p});
    positions[p] = it == committed.end() ? r.first : std::clamp(it->second, r.first, r.second);
  }
  return positions;
}

// A replay under way: where it reads and writes, and what it has done.
struct Copy {
  const Plan& plan;
  const std::string& checkpoint;
  rd_kafka_t* producer;
  RangeReader& reader;
  rd_kafka_consumer_group_metadata_t* cgmd;  // the replay group's, for the progress in each transaction
  Progress& progress;
  int timeout_ms;
  double rate;  // records a second; 0: unpaced
  bool same_partitions;  // source and destination have as many partitions: a copy keeps its partition
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::time_point idle_deadline;  // no record of the range by then: Kafka is gone
  int64_t replayed = 0;  // records copied this run
  int64_t read = 0;      // records of the range read, before this run too
};

// Produces a copy of `m` into the destination within the open transaction:
// its headers but an earlier relay-replayed-from, and one naming `m`.
absl::Status ProduceCopy(const Copy& c, const rd_kafka_message_t* m) {
  rd_kafka_headers_t* headers = rd_kafka_headers_new(8);
  rd_kafka_headers_t* in_headers = nullptr;
  if (rd_kafka_message_headers(m, &in_headers) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* name;
    const void* value;
    size_t size;
    for (size_t i = 0; rd_kafka_header_get_all(in_headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
      if (std::string_view(name) == kReplayedFrom) continue;
      rd_kafka_header_add(headers, name, -1, value, static_cast<ssize_t>(size));
    }
  }
  std::string from = absl::StrCat(c.plan.source, "/", m->partition, "/", m->offset);
  rd_kafka_header_add(headers, kReplayedFrom, -1, from.data(), static_cast<ssize_t>(from.size()));
  // The headers pass to librdkafka only when the produce is accepted;
  // a full local queue is waited out.
  rd_kafka_resp_err_t e;
  while ((e = rd_kafka_producev(c.producer, RD_KAFKA_V_TOPIC(c.plan.dest.c_str()),
                                RD_KAFKA_V_PARTITION(c.same_partitions ? m->partition : RD_KAFKA_PARTITION_UA),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(m->key, m->key_len),
                                RD_KAFKA_V_VALUE(m->payload, m->len), RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_END)) ==
         RD_KAFKA_RESP_ERR__QUEUE_FULL) {
    rd_kafka_poll(c.producer, 100);
  }
  if (e) {
    rd_kafka_headers_destroy(headers);
    return absl::UnavailableError(std::string("produce to ") + c.plan.dest + ": " + rd_kafka_err2str(e) +
                                  " (nothing of this transaction was written; run again to resume)");
  }
  return absl::OkStatus();
}

// Copies the records of one transaction (at most kBatchRecords, for about
// a second): `copied` of the `read` records read.
absl::Status CopyBatch(Copy& c, int& copied, int64_t& read) {
  auto txn_start = std::chrono::steady_clock::now();
  while (!c.reader.finished() && !g_interrupted && copied < kBatchRecords &&
         std::chrono::steady_clock::now() - txn_start < std::chrono::milliseconds(1000)) {
    RELAY_ASSIGN_OR_RETURN(rd_kafka_message_t * m, c.reader.Next(std::chrono::milliseconds(100)));
    if (!m) continue;
    absl::Cleanup free_m = [m] { rd_kafka_message_destroy(m); };
    ++read;
    c.idle_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(c.timeout_ms);
    std::string_view key(m->key ? static_cast<const char*>(m->key) : "", m->key_len);
    if (!KeyWanted(c.plan, key)) continue;
    if (c.rate > 0) {
      // Paced from the start: the n-th record goes at n / rate seconds.
      auto due = c.started + std::chrono::microseconds(static_cast<int64_t>((c.replayed + copied) * 1e6 / c.rate));
      std::this_thread::sleep_until(due);
    }
    RELAY_RETURN_IF_ERROR(ProduceCopy(c, m));
    ++copied;
    rd_kafka_poll(c.producer, 0);
  }
  return absl::OkStatus();
}

// Commits the open transaction with the progress past every record read:
// the copies and the progress become visible together, or neither.
absl::Status CommitWithProgress(Copy& c) {
  rd_kafka_topic_partition_list_t* offsets = rd_kafka_topic_partition_list_new(c.plan.ranges.size());
  for (const auto& [p, next] : c.reader.positions()) {
    rd_kafka_topic_partition_list_add(offsets, c.plan.source.c_str(), p)->offset = next;
  }
  rd_kafka_error_t* e = rd_kafka_send_offsets_to_transaction(c.producer, offsets, c.cgmd, c.timeout_ms);
  rd_kafka_topic_partition_list_destroy(offsets);
  if (!e) e = rd_kafka_commit_transaction(c.producer, c.timeout_ms);
  if (!e) return absl::OkStatus();
  std::string why = rd_kafka_error_string(e);
  bool abortable = rd_kafka_error_txn_requires_abort(e);
  rd_kafka_error_destroy(e);
  if (abortable) rd_kafka_error_destroy(rd_kafka_abort_transaction(c.producer, c.timeout_ms));
  c.progress.Finish();
  return absl::UnavailableError("commit of a replay transaction failed: " + why + " (its records are not visible; " +
                                std::to_string(c.replayed) + " records replayed before it; run again with --resume " +
                                c.checkpoint + ")");
}

// One transaction: a batch of copies and the progress past them. Nothing
// of a transaction that fails is visible.
absl::Status Transaction(Copy& c) {
  if (rd_kafka_error_t* e = rd_kafka_begin_transaction(c.producer)) {
    std::string why = rd_kafka_error_string(e);
    rd_kafka_error_destroy(e);
    return absl::UnavailableError("begin transaction: " + why);
  }
  int copied = 0;
  int64_t read = 0;
  absl::Status s = CopyBatch(c, copied, read);
  if (s.ok() && read == 0 && !c.reader.finished() && std::chrono::steady_clock::now() > c.idle_deadline) {
    s = absl::UnavailableError("no record of the range came for " + std::to_string(c.timeout_ms / 1000) +
                               " s: is Kafka up? (run again to resume)");
  }
  if (!s.ok()) {
    rd_kafka_error_destroy(rd_kafka_abort_transaction(c.producer, c.timeout_ms));
    return s;
  }
  RELAY_RETURN_IF_ERROR(CommitWithProgress(c));
  c.replayed += copied;
  c.read += read;
  c.progress.Update(c.read);
  return absl::OkStatus();
}

// The end of a run: interrupted (exit 4, how to resume), or complete (the
// checkpoint marked done, the replay group deleted).
int Summary(const Context& ctx, kafka::ClusterAdmin& admin, Plan& plan, const Copy& c, bool force) {
  const int64_t total = plan.total();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - c.started).count();
  json::object summary{{"id", plan.id},          {"source", plan.source},   {"dest", plan.dest},
                       {"checkpoint", c.checkpoint}, {"replayed", c.replayed}, {"read", c.read},
                       {"records_in_range", total}, {"seconds", secs},
                       {"records_per_second", secs > 0 ? c.replayed / secs : 0.0}};
  if (g_interrupted) {
    summary["interrupted"] = true;
    if (ctx.json) PrintJson(summary);
    else std::cout << "interrupted after " << c.read << " of " << total << " records (" << c.replayed
                   << " replayed this run); resume with: relayctl replay --resume " << c.checkpoint
                   << (force ? " --force" : "") << "\n";
    return kInterrupted;
  }
  plan.done = true;
  if (auto s = SavePlan(c.checkpoint, plan); !s.ok()) return FailStatus(s);
  (void)admin.DeleteGroup(plan.group());
  summary["complete"] = true;
  if (ctx.json) PrintJson(summary);
  else std::cout << absl::StrFormat("replayed %d records of %s into %s in %.1f s (%.0f/s); complete\n", c.replayed,
                                    plan.source, plan.dest, secs, secs > 0 ? c.replayed / secs : 0.0);
  return kOk;
}

// Carries out the plan from where it stands, in transactions, until done or
// interrupted; `checkpoint` already holds the plan.
int Run(const Context& ctx, kafka::ClusterAdmin& admin, Plan& plan, const std::string& checkpoint, double rate,
        bool same_partitions, bool force) {
  const int timeout_ms = static_cast<int>(std::max<int64_t>(ctx.timeout.count(), 30'000));
  auto producer = OpenProducer(ctx, plan, timeout_ms);
  if (!producer.ok()) return FailStatus(producer.status());
  auto positions = StartPositions(admin, plan);
  if (!positions.ok()) return FailStatus(positions.status());
  int64_t already = 0;
  for (const auto& [p, r] : plan.ranges) already += positions->at(p) - r.first;
  if (!ctx.json) {
    std::cerr << "relayctl: replay " << plan.id << ": " << plan.source << " -> " << plan.dest << ", " << plan.total()
              << " records in range" << (already ? ", " + std::to_string(already) + " done before" : "")
              << "; checkpoint " << checkpoint << "\n";
  }

  RangeReader reader(ctx, plan);
  if (!reader.error().empty()) return Fail(kFailed, reader.error());
  if (auto s = reader.Start(*positions); !s.ok()) return FailStatus(s);
  rd_kafka_consumer_group_metadata_t* cgmd = rd_kafka_consumer_group_metadata_new(plan.group().c_str());
  absl::Cleanup free_cgmd = [cgmd] { rd_kafka_consumer_group_metadata_destroy(cgmd); };

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  Progress progress(ctx, "replay " + plan.source + " -> " + plan.dest, plan.total());
  Copy c{plan, checkpoint, producer->get(), reader, cgmd, progress, timeout_ms, rate, same_partitions,
         std::chrono::steady_clock::now(), std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms),
         /*replayed=*/0, /*read=*/already};
  while (!reader.finished() && !g_interrupted) {
    if (auto s = Transaction(c); !s.ok()) return FailStatus(s);
  }
  progress.Finish();
  return Summary(ctx, admin, plan, c, force);
}

}  // namespace

int Replay(const Context& ctx, const std::vector<std::string>& args) {
  auto flags = Flags::Parse(
      args,
      {"to", "partition", "from-offset", "to-offset", "from-time", "to-time", "key", "rate", "checkpoint", "resume",
       "group", "reset-to", "topic"},
      {"dry-run", "force"});
  if (!flags.ok()) return Fail(kBadInput, std::string(flags.status().message()));
  if (flags->Has("group")) return ResetGroup(ctx, *flags);

  double rate = 0;
  if (flags->Has("rate") && (!absl::SimpleAtod(flags->Get("rate"), &rate) || rate < 0.1)) {
    // Slower, a transaction would be held open for longer than its timeout.
    return Fail(kBadInput, "--rate must be at least 0.1 records a second");
  }
  auto admin = kafka::NewClusterAdmin(ctx.bootstrap, ctx.timeout);
  if (!admin.ok()) return FailStatus(admin.status());
  auto topics = (*admin)->Topics();
  if (!topics.ok()) return FailStatus(topics.status());

  std::string checkpoint = flags->Has("resume") ? flags->Get("resume") : flags->Get("checkpoint");
  bool resuming = !checkpoint.empty() && std::filesystem::exists(checkpoint);
  if (flags->Has("resume") && !resuming) return Fail(kBadInput, "no checkpoint " + checkpoint);
  auto plan = resuming ? ResumedPlan(checkpoint, *flags) : NewPlan(**admin, *topics, *flags);
  if (!plan.ok()) return FailStatus(plan.status());
  if (plan->done) {
    if (ctx.json) PrintJson(json::object{{"checkpoint", checkpoint}, {"already_complete", true}, {"replayed", 0}});
    else std::cout << "replay " << plan->id << " (" << checkpoint << ") is already complete: nothing to do\n";
    return kOk;
  }
  if (!topics->count(plan->source)) return Fail(kBadInput, "no topic " + plan->source);
  if (!topics->count(plan->dest)) return Fail(kBadInput, "no topic " + plan->dest);
  bool safe = ReplaySafeTopics().count(plan->dest) > 0;
  if (!safe && !flags->Has("force") && !flags->Has("dry-run")) {
    return Fail(kRefused, "the consumers of " + plan->dest +
                              " are not declared replay-safe (deploy/kafka/replay-safe.txt); --force to replay anyway");
  }
  if (flags->Has("dry-run")) return DryRun(ctx, *plan, safe);

  if (checkpoint.empty()) checkpoint = DefaultCheckpoint(plan->id);
  if (!resuming) {
    if (auto s = SavePlan(checkpoint, *plan); !s.ok()) return FailStatus(s);
  }
  bool same_partitions = topics->at(plan->source) == topics->at(plan->dest);
  return Run(ctx, **admin, *plan, checkpoint, rate, same_partitions, flags->Has("force"));
}

}  // namespace relay::relayctl
