// relayctl on the real broker: bad input refused with one line and nothing
// moved; a dry run that moves nothing; a replay interrupted (SIGINT, then
// SIGKILL) and resumed with no gap and no repeat; a dead letter of
// relay-dispatch (the App not installed), redriven before the fix (it fails
// again and is never redriven by itself) and after it (one GitHub call).
// The full replay of every topic on the dev stack, checked against the
// dashboards' queries and the fake GitHub, is in tools/dev replay-check
// (run by the e2e test).
#include <set>

#include "relay/kafka/consumer.h"

#include "dispatch_it_support.h"

namespace relay::dispatch_it {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

int64_t EndOffsets(const std::string& topic) {
  CtlRun r = Relayctl("--json status");
  boost::system::error_code ec;
  auto v = json::parse(r.out, ec);
  if (ec) return -1;
  for (const auto& t : v.at("topics").as_array()) {
    if (t.at("topic").as_string() != topic) continue;
    int64_t sum = 0;
    for (const auto& e : t.at("end_offsets").as_array()) sum += e.as_int64();
    return sum;
  }
  return -1;
}

class RelayctlIT : public DispatchIT {
 protected:
  // Two fresh topics of 3 partitions and `n` records (key k<i % 40>) in the first.
  void Topics(int n) {
    src_ = "it.relayctl." + Unique() + ".src";
    dst_ = "it.relayctl." + Unique() + ".dst";
    ASSERT_EQ(testing::CreateTopic(testing::FixtureBootstrap(), src_, 3), "");
    ASSERT_EQ(testing::CreateTopic(testing::FixtureBootstrap(), dst_, 3), "");
    kafka::ProducerOptions po;
    po.bootstrap = testing::FixtureBootstrap();
    auto producer = std::move(*kafka::NewKafkaProducer(po, nullptr));
    std::vector<std::future<absl::Status>> acks;
    for (int i = 0; i < n; ++i) {
      auto p = std::make_shared<std::promise<absl::Status>>();
      acks.push_back(p->get_future());
      producer->Send(kafka::Record{src_, "k" + std::to_string(i % 40), "value-" + std::to_string(i), {{"h", "x"}}},
                     [p](absl::Status s) { p->set_value(s); });
    }
    for (auto& a : acks) ASSERT_TRUE(a.get().ok());
  }
  std::string src_, dst_;
};

TEST_F(RelayctlIT, BadInputExitsNonZeroWithOneClearLineAndMovesNothing) {
  Topics(50);
  struct Case {
    std::string args;
    int code;
    std::string says;
  };
  std::vector<Case> cases = {
      {"replay no.such.topic --to " + dst_, 2, "no topic no.such.topic"},
      {"replay " + src_ + " --to no.such.topic --force", 2, "no topic no.such.topic"},
      {"replay " + src_ + " --to " + dst_ + " --force --from-time -1h --to-time -2h", 2, "reversed"},
      {"replay " + src_ + " --to " + dst_ + " --force --from-offset 10 --to-offset 5", 2, "reversed"},
      {"replay " + src_ + " --to " + dst_ + " --force --partition 7", 2, "no partition 7"},
      {"replay " + src_ + " --to " + dst_ + " --force --from-time yesterday", 2, "cannot read the time"},
      {"replay --group no-such-group-" + Unique() + " --reset-to -1h", 2, "no consumer group"},
      {"replay " + src_ + " --to " + dst_, 3, "not declared replay-safe"},
      {"replay " + src_ + " --to dispatch.budget", 3, "not declared replay-safe"},
      {"dlq show no.such.topic.dlq 0", 2, "no topic"},
      {"dlq redrive github.requests.dlq", 2, "say which dead letters"},
      {"frobnicate", 2, "unknown command"},
      {"replay " + src_ + " --bogus", 2, "unknown option --bogus"},
  };
  for (const auto& c : cases) {
    CtlRun r = Relayctl(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says)) << c.args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("relayctl: ", 0), 0u) << r.err;
  }
  CtlRun down = Relayctl("replay " + src_ + " --to " + dst_ + " --force --timeout 3", "127.0.0.1:1");
  EXPECT_EQ(down.code, 1) << down.err;
  EXPECT_THAT(down.err, HasSubstr("cannot reach Kafka at 127.0.0.1:1"));
  EXPECT_EQ(std::count(down.err.begin(), down.err.end(), '\n'), 1) << down.err;
  EXPECT_EQ(EndOffsets(dst_), 0);
}

TEST_F(RelayctlIT, DryRunCountsAndSamplesAndMovesNothing) {
  Topics(400);
  CtlRun r = Relayctl("--json replay " + src_ + " --to " + dst_ + " --dry-run --key k3 --key k4");
  ASSERT_EQ(r.code, 0) << r.err;
  auto v = json::parse(r.out);
  EXPECT_EQ(v.at("records_read").as_int64(), 400);
  EXPECT_EQ(v.at("would_replay").as_int64(), 20);
  EXPECT_EQ(v.at("samples").as_array().size(), 5u);
  EXPECT_FALSE(v.at("dest_replay_safe").as_bool());
  EXPECT_EQ(EndOffsets(dst_), 0);
  EXPECT_EQ(EndOffsets(src_), 400);
}

TEST_F(RelayctlIT, AnInterruptedReplayResumesWithoutGapsOrRepeats) {
  const int n = 6000;
  Topics(n);
  std::string checkpoint = Env("RELAY_IT_DIR") + "/relayctl-" + Unique() + "/replay.json";
  std::string cmd = Env("RELAY_IT_RELAYCTL_BIN") + " --no-progress --bootstrap " + testing::FixtureBootstrap() +
                    " replay " + src_ + " --to " + dst_ + " --force --checkpoint " + checkpoint;
  auto start = [&](const std::string& rate) {
    return std::make_unique<Subprocess>(std::vector<std::string>{"/bin/sh", "-c", "exec " + cmd + " --rate " + rate},
                                        std::map<std::string, std::string>{},
                                        Env("RELAY_IT_DIR") + "/relayctl-resume.log");
  };
  // Copying has begun (a transaction of it committed, so its SIGINT handler
  // is in place): a fixed sleep raced relayctl's start-up on a slow
  // sanitizer build.
  auto copying = [&] {
    for (auto until = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < until;) {
      if (EndOffsets(dst_) > 0) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  };
  // SIGINT: the transaction in hand is committed, then exit 4.
  // 300 a second: neither run can finish the 6,000 before it is stopped,
  // however long its first commit takes to show.
  auto first = start("300");
  ASSERT_TRUE(copying()) << "the first run never began copying";
  std::this_thread::sleep_for(500ms);
  first->Signal(SIGINT);
  EXPECT_EQ(first->Wait(30s), 4);
  int64_t after_first = EndOffsets(dst_);
  EXPECT_GT(after_first, 0);
  EXPECT_LT(after_first, n);
  // SIGKILL mid-transaction: its open transaction is aborted when the next
  // run starts (same transactional id), so none of it is ever visible.
  auto second = start("300");
  std::this_thread::sleep_for(1500ms);
  second->Signal(SIGKILL);
  second->Wait(10s);
  CtlRun last = Relayctl("--json replay --resume " + checkpoint + " --force");
  ASSERT_EQ(last.code, 0) << last.err;
  EXPECT_TRUE(json::parse(last.out).at("complete").as_bool());
  // Read committed, as every relay consumer does.
  std::string error;
  auto copies = testing::ReadTopic(testing::FixtureBootstrap(), dst_, 60s, &error);
  ASSERT_TRUE(error.empty()) << error;
  auto sources = testing::ReadTopic(testing::FixtureBootstrap(), src_, 60s, &error);
  std::map<std::string, std::pair<std::string, std::string>> by_origin;  // "src/p/o" -> key, value
  for (const auto& s : sources) by_origin[src_ + "/" + std::to_string(s.partition) + "/" + std::to_string(s.offset)] = {s.key, s.value};
  std::map<std::string, int> seen;
  for (const auto& c : copies) {
    const std::string* from = c.FindHeader("relay-replayed-from");
    ASSERT_NE(from, nullptr);
    ++seen[*from];
    ASSERT_TRUE(by_origin.count(*from)) << *from;
    EXPECT_EQ(by_origin[*from].first, c.key);
    EXPECT_EQ(by_origin[*from].second, c.value);
    ASSERT_NE(c.FindHeader("h"), nullptr);  // the record's own headers travel with it
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n));  // no gap
  for (const auto& [origin, count] : seen) EXPECT_EQ(count, 1) << origin;  // no repeat
  // Run again with the finished checkpoint: nothing more.
  CtlRun again = Relayctl("replay --resume " + checkpoint + " --force");
  EXPECT_EQ(again.code, 0);
  EXPECT_THAT(again.out, HasSubstr("already complete"));
  EXPECT_EQ(testing::ReadTopic(testing::FixtureBootstrap(), dst_, 60s, &error).size(), copies.size());
}

TEST_F(RelayctlIT, ADeadLetterRedrivenAfterTheFixLandsOnceAndNeverLoops) {
  DispatchStack stack("relayctl");
  std::string gone = "it-org/gone-" + Unique();
  stack.SetAllowlist("L2: [it-org/ok, " + gone + "]\n");
  stack.Fake("POST", "/_fake/config", R"({"not_installed":[")" + gone + R"("]})");
  ASSERT_NE(stack.StartDispatch(1), 0) << stack.Log(1);
  std::string run = "redrive-" + Unique();
  stack.Produce(Find(corpus_, "pull_request", "opened").at(0), run);
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(1, 60s, 3s), 1u);  // it-org/ok
  auto calls_to = [&](const std::string& repo) {
    int n = 0;
    for (const auto& c : DispatchCalls(stack)) n += c.repo == repo && c.status == 204;
    return n;
  };
  auto letters = [&] {
    CtlRun r = Relayctl("--json dlq list --topic github.requests.dlq");
    EXPECT_EQ(r.code, 0) << r.err;
    std::vector<json::object> out;
    json::value all = json::parse(r.out);
    for (auto& l : all.as_array()) {
      if (l.at("key").as_string() == gone) out.push_back(l.as_object());
    }
    return out;
  };
  // The dead letter, with its reason and source.
  std::vector<json::object> dead;
  for (int i = 0; i < 100 && dead.empty(); ++i, std::this_thread::sleep_for(100ms)) dead = letters();
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_THAT(std::string(dead[0].at("reason").as_string()), HasSubstr("not installed"));
  EXPECT_EQ(dead[0].at("source_topic").as_string(), "github.requests");
  EXPECT_EQ(dead[0].at("state").as_string(), "pending");
  CtlRun show = Relayctl("--json dlq show github.requests.dlq " + std::to_string(dead[0].at("offset").as_int64()));
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_EQ(json::parse(show.out).at("value").at("message").at("repo").as_string(), gone);

  // Redriven before the fix: it fails again, back in the DLQ with the
  // header that names the first, and is not redriven by a plain redrive.
  CtlRun early = Relayctl("dlq redrive github.requests.dlq --key " + gone);
  ASSERT_EQ(early.code, 0) << early.err;
  for (int i = 0; i < 150 && letters().size() < 2; ++i) std::this_thread::sleep_for(100ms);
  dead = letters();
  ASSERT_EQ(dead.size(), 2u);
  EXPECT_EQ(dead[0].at("state").as_string(), "redriven");
  EXPECT_NE(dead[1].at("failed_again_after_redrive_of").as_string(), "");
  CtlRun loop = Relayctl("--json dlq redrive github.requests.dlq --key " + gone);
  ASSERT_EQ(loop.code, 0) << loop.err;
  EXPECT_EQ(json::parse(loop.out).at("selected").as_int64(), 0);
  EXPECT_EQ(calls_to(gone), 0);

  // The fix (the App installed), then the redrive: one call.
  stack.Fake("POST", "/_fake/config", R"({"not_installed":[]})");
  CtlRun fixed = Relayctl("dlq redrive github.requests.dlq --key " + gone + " --again");
  ASSERT_EQ(fixed.code, 0) << fixed.err;
  for (int i = 0; i < 150 && calls_to(gone) < 1; ++i) std::this_thread::sleep_for(100ms);
  std::this_thread::sleep_for(2s);
  EXPECT_EQ(calls_to(gone), 1);
  // Redriving again sends nothing: both dead letters are marked redriven.
  CtlRun twice = Relayctl("--json dlq redrive github.requests.dlq --key " + gone + " --again");
  EXPECT_EQ(json::parse(twice.out).at("selected").as_int64(), 0);
  std::this_thread::sleep_for(2s);
  EXPECT_EQ(calls_to(gone), 1);
  EXPECT_EQ(letters().size(), 2u);
}

TEST_F(RelayctlIT, StatusShowsLagInRecordsAndAgeAndDeadLetters) {
  Topics(100);
  std::string group = "it-relayctl-" + Unique();
  // A group that consumed 60 of the 100 records (offsets committed by hand).
  CtlRun reset = Relayctl("replay --group " + group + " --reset-to -1h --force");
  EXPECT_EQ(reset.code, 2);  // no such group yet
  {
    // relay's own consumer: 60 records handled, their offsets committed.
    prometheus::Registry registry;
    kafka::ProducerOptions po;
    po.bootstrap = testing::FixtureBootstrap();
    auto dlq = std::move(*kafka::NewKafkaProducer(po, nullptr));
    kafka::ConsumerOptions co;
    co.bootstrap = testing::FixtureBootstrap();
    co.group_id = group;
    co.topics = {src_};
    auto consumer = std::move(*kafka::NewKafkaConsumer(co, dlq.get(), &registry));
    int handled = 0;
    ASSERT_TRUE(consumer
                    ->Run([&](const kafka::ConsumedRecord&) {
                      if (++handled == 60) consumer->Stop();
                      return handled <= 60 ? absl::OkStatus() : absl::UnavailableError("past 60");
                    })
                    .ok());
  }
  CtlRun r = Relayctl("--json status");
  ASSERT_EQ(r.code, 0) << r.err;
  auto v = json::parse(r.out);
  int64_t lag = -1, age = -1;
  for (const auto& g : v.at("groups").as_array()) {
    if (g.at("group").as_string() == group && g.at("topic").as_string() == src_) {
      lag = g.at("lag_records").as_int64();
      age = g.at("oldest_unconsumed_age_ms").as_int64();
    }
  }
  EXPECT_EQ(lag, 40);
  EXPECT_GE(age, 0);
  EXPECT_LT(age, 600'000);
  // Reset the (now empty) group to an hour ago: everything is read again.
  CtlRun back = Relayctl("--json replay --group " + group + " --reset-to -1h --force");
  ASSERT_EQ(back.code, 0) << back.err;
  EXPECT_EQ(json::parse(back.out).at("records_read_again").as_int64(), 60);
  bool found = false;
  for (const auto& d : v.at("dead_letters").as_array()) found |= d.at("topic").as_string() == "github.requests.dlq";
  EXPECT_TRUE(found);
}

// The redelivery reconciler: the fake GitHub delivers webhooks to a real
// intake (signed), fails some (a 503, an unreachable intake), reports some
// as delivered that never reached intake ("lost"), and one that failed is
// delivered by GitHub itself on a second attempt. A scan asked through
// relayctl must ask GitHub to deliver again exactly the failed and lost
// guids, each once, under a budget of 2 writes a second, and they must
// then be in github.webhooks; a second scan asks nothing.
TEST_F(RelayctlIT, TheReconcilerRedeliversExactlyTheFailedAndUnrecordedGuidsOnceWithinTheBudget) {
  DispatchStack stack("redeliveries");
  stack.SetAllowlist("L2: [it-org/ok]\n");
  // A real intake, which the fake delivers to.
  std::string dir = stack.dir();
  auto intake = std::make_unique<Subprocess>(
      std::vector<std::string>{Env("RELAY_IT_INTAKE_BIN"), "--port-file", dir + "/intake.port"},
      std::map<std::string, std::string>{{"RELAY_HTTP_LISTEN", "127.0.0.1:0"},
                                         {"RELAY_KAFKA_BOOTSTRAP", testing::FixtureBootstrap()},
                                         {"RELAY_INTAKE_WEBHOOK_SECRETS", Env("RELAY_IT_SECRET")}},
      dir + "/intake.log");
  ASSERT_TRUE(testing::WaitForFile(dir + "/intake.port", 30s));
  std::string intake_url = "http://127.0.0.1:" + Trim(ReadFile(dir + "/intake.port")) + "/github/webhook";
  stack.Fake("POST", "/_fake/config",
             json::serialize(json::object{{"deliver_to", intake_url}, {"webhook_secret", Env("RELAY_IT_SECRET")}}));
  std::string topic = "it.redeliveries." + Unique();
  ASSERT_EQ(testing::CreateTopic(testing::FixtureBootstrap(), topic, 1), "");
  ASSERT_NE(stack.StartDispatch(1, {{"RELAY_DISPATCH_REDELIVERIES_TOPIC", topic},
                                    {"RELAY_DISPATCH_REDELIVERY_GROUP_ID", "it-redeliveries-" + Unique()},
                                    {"RELAY_DISPATCH_REDELIVERY_INTERVAL", "0s"},
                                    {"RELAY_DISPATCH_REDELIVERY_GRACE", "1s"},
                                    {"RELAY_GITHUB_MAX_WRITES_PER_MINUTE", "2"},
                                    {"RELAY_GITHUB_WRITE_WINDOW", "1s"}}),
            0)
      << stack.Log(1);

  std::string run = "redeliver-" + Unique() + "-";
  const auto& payloads = corpus_;
  std::map<std::string, int64_t> first_id;  // guid -> the fake's first attempt id
  auto deliver = [&](const std::string& guid, const std::string& mode, size_t i) {
    json::value d = stack.Fake("POST", "/_fake/deliver",
                               json::serialize(json::object{{"event", payloads[i].event},
                                                            {"body", payloads[i].body},
                                                            {"guid", guid},
                                                            {"mode", mode}}));
    ASSERT_TRUE(d.is_object()) << json::serialize(d);
    first_id.emplace(guid, d.at("id").as_int64());
  };
  std::set<std::string> want;  // the guids that must be redelivered
  for (int i = 0; i < 3; ++i) deliver(run + "ok-" + std::to_string(i), "ok", i);
  for (int i = 0; i < 2; ++i) want.insert(run + "fail-" + std::to_string(i)), deliver(run + "fail-" + std::to_string(i), "fail", 10 + i);
  want.insert(run + "unreachable"), deliver(run + "unreachable", "unreachable", 20);
  for (int i = 0; i < 2; ++i) want.insert(run + "lost-" + std::to_string(i)), deliver(run + "lost-" + std::to_string(i), "lost", 30 + i);
  deliver(run + "retried", "fail", 40);
  deliver(run + "retried", "ok", 40);  // GitHub's own second attempt went through
  stack.Fake("POST", "/_fake/deliveries/drain");
  std::this_thread::sleep_for(2s);  // past the grace

  auto redeliveries = [&] {
    std::map<int64_t, int> out;  // attempt id -> requests
    json::value calls = stack.Fake("GET", "/_fake/calls?brief=1");
    for (const auto& c : calls.as_array()) {
      const auto& o = c.as_object();
      if (o.at("endpoint").as_string() != "POST /app/hook/deliveries/{delivery_id}/attempts") continue;
      std::string path(o.at("path").as_string());
      int64_t id = std::stoll(path.substr(std::string("/app/hook/deliveries/").size()));
      EXPECT_EQ(o.at("status").as_int64(), 202) << path;
      ++out[id];
    }
    return out;
  };
  CtlRun scan = Relayctl("--json redeliveries run --since -1h --wait --topic " + topic);
  ASSERT_EQ(scan.code, 0) << scan.err << stack.Log(1);
  auto cp = json::parse(scan.out);
  EXPECT_TRUE(cp.at("covered").as_bool()) << scan.out;
  EXPECT_EQ(cp.at("requested").as_int64(), 5) << scan.out;
  EXPECT_EQ(cp.at("failed").as_int64(), 3) << scan.out;
  EXPECT_EQ(cp.at("not_recorded").as_int64(), 2) << scan.out;
  std::map<int64_t, int> asked;
  for (int i = 0; i < 100 && (asked = redeliveries()).size() < want.size(); ++i) std::this_thread::sleep_for(100ms);
  std::set<int64_t> want_ids;
  for (const auto& g : want) want_ids.insert(first_id.at(g));
  std::set<int64_t> got_ids;
  for (const auto& [id, n] : asked) {
    got_ids.insert(id);
    EXPECT_EQ(n, 1) << id;
  }
  EXPECT_EQ(got_ids, want_ids);
  // Within the budget (2 writes a 1 s window, a write counting from its
  // grant to a window after its answer): no 3 requests within a second.
  std::vector<int64_t> t0;
  json::value all_calls = stack.Fake("GET", "/_fake/calls?brief=1");
  for (const auto& c : all_calls.as_array()) {
    if (c.at("endpoint").as_string() == "POST /app/hook/deliveries/{delivery_id}/attempts") t0.push_back(c.at("t0").as_int64());
  }
  std::sort(t0.begin(), t0.end());
  for (size_t i = 2; i < t0.size(); ++i) EXPECT_GE(t0[i] - t0[i - 2], 900) << i;
  stack.Fake("POST", "/_fake/deliveries/drain");
  // Delivered again, signed: intake recorded every one of them.
  std::set<std::string> recorded;
  for (const auto& r : TopicRecords("github.webhooks", run)) recorded.insert(*r.FindHeader("relay-delivery-id"));
  for (const auto& g : want) EXPECT_TRUE(recorded.count(g)) << g;
  EXPECT_TRUE(recorded.count(run + "ok-0"));
  EXPECT_TRUE(recorded.count(run + "retried"));
  // Never twice: a second scan asks nothing.
  CtlRun again = Relayctl("--json redeliveries run --since -1h --wait --topic " + topic);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(json::parse(again.out).at("requested").as_int64(), 0) << again.out;
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(redeliveries().size(), want.size());
  // The operator's view: five requested, accepted.
  CtlRun view = Relayctl("--json redeliveries --topic " + topic);
  ASSERT_EQ(view.code, 0) << view.err;
  auto v = json::parse(view.out);
  EXPECT_EQ(v.at("requested").as_int64(), 5);
  for (int i = 0; i < 50 && json::parse(Relayctl("--json redeliveries --topic " + topic).out).at("by_result").as_object().if_contains("accepted") == nullptr; ++i) {
    std::this_thread::sleep_for(100ms);
  }
  std::string m = HttpClient("127.0.0.1", static_cast<uint16_t>(std::stoi(Trim(ReadFile(dir + "/dispatch1.port"))))).Get("/metrics").body;
  EXPECT_THAT(m, HasSubstr("relay_redelivery_requests_total{reason=\"not_recorded\"} 2"));
  EXPECT_THAT(m, HasSubstr("relay_redelivery_requests_total{reason=\"failed\"} 3"));
  EXPECT_THAT(m, HasSubstr("relay_redelivery_results_total{result=\"accepted\"} 5"));
  EXPECT_THAT(m, HasSubstr("relay_redelivery_owner 1"));
}

// relayctl redeliveries run --wait takes only a listing that served its
// request for an answer: a checkpoint newer than the request that did not
// (a periodic listing back to its checkpoint, after the asked one failed)
// leaves the asked window uncovered, and relayctl says so and exits 1
// (before: it took any newer checkpoint and exited 0).
TEST_F(RelayctlIT, RedeliveriesRunWaitSaysWhenTheAskedWindowWasNotCovered) {
  std::string topic = "it.redeliveries." + Unique();
  ASSERT_EQ(testing::CreateTopic(testing::FixtureBootstrap(), topic, 1), "");
  v1::RedeliveryRecord cp;
  cp.mutable_checkpoint()->set_scanned_at_unix_ms(NowMs() + 60'000);
  cp.mutable_checkpoint()->set_listed_since_unix_ms(NowMs() - 3'600'000);
  kafka::ProducerOptions po;
  po.bootstrap = testing::FixtureBootstrap();
  auto producer = std::move(*kafka::NewKafkaProducer(po, nullptr));
  std::promise<absl::Status> acked;
  producer->Send(kafka::MessageRecord(topic, "checkpoint", cp), [&](absl::Status s) { acked.set_value(s); });
  ASSERT_TRUE(acked.get_future().get().ok());
  CtlRun r = Relayctl("--json redeliveries run --since -6h --wait --wait-for 3s --topic " + topic);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("was not covered within 3s"));
  EXPECT_THAT(r.err, HasSubstr("without serving this request"));
  boost::system::error_code ec;
  auto out = json::parse(r.out, ec);
  ASSERT_FALSE(ec) << r.out;
  EXPECT_FALSE(out.at("covered").as_bool());
  CtlRun bad = Relayctl("redeliveries run --wait --wait-for soon --topic " + topic);
  EXPECT_EQ(bad.code, 2) << bad.err;
}

}  // namespace
}  // namespace relay::dispatch_it
