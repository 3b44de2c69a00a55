// relay-dispatch end to end on the real Kafka broker, against the fake
// GitHub (its own process), fed with real @octokit/webhooks-examples
// payloads wrapped as intake wraps them. Each test has its own upstream
// repository name and consumer group, so tests sharing the broker and its
// topics do not see each other's work.
#include "dispatch_it_support.h"

namespace relay::dispatch_it {
namespace {

TEST_F(DispatchIT, RealPayloadsMakeExactlyTheExpectedCallsForEveryLevel) {
  DispatchStack stack("calls");
  stack.SetAllowlist(kFourLevels);
  ASSERT_NE(stack.StartDispatch(1), 0) << stack.Log(1);
  std::string run = "calls-" + Unique() + "-";
  // Relevant: opened, synchronize, closed, push. Ignored: an issue, a
  // labelled PR without a ciflow/crcr label, an edited PR.
  auto opened = Find(corpus_, "pull_request", "opened").at(0);
  auto sync = Find(corpus_, "pull_request", "synchronize").at(0);
  auto closed = Find(corpus_, "pull_request", "closed").at(0);
  Payload push;
  for (const auto& p : Find(corpus_, "push", "")) {
    if (p.body.find("\"deleted\": true") == std::string::npos && p.body.find("\"deleted\":true") == std::string::npos) {
      push = p;
      break;
    }
  }
  ASSERT_FALSE(push.body.empty());
  stack.Produce(opened, run + "opened");
  stack.Produce(sync, run + "sync");
  stack.Produce(closed, run + "closed");
  stack.Produce(push, run + "push");
  stack.Produce(Find(corpus_, "issues", "opened").at(0), run + "issue");
  stack.Produce(Find(corpus_, "pull_request", "labeled").at(0), run + "labeled");
  // A labelled PR with a ciflow/crcr label: the same real payload, label renamed.
  Payload crcr = Find(corpus_, "pull_request", "labeled").at(0);
  json::value doc = json::parse(crcr.body);
  std::string old_label(doc.at("label").at("name").as_string());
  doc.as_object()["label"].as_object()["name"] = "ciflow/crcr/xpu";
  for (auto& l : doc.as_object()["pull_request"].as_object()["labels"].as_array()) {
    if (l.at("name").as_string() == old_label) l.as_object()["name"] = "ciflow/crcr/xpu";
  }
  stack.Produce({"pull_request", json::serialize(doc), ""}, run + "crcr");
  // check_run rerequested: a real one, on a relay check run of this app.
  Payload rerun = Find(corpus_, "check_run", "rerequested").at(0);
  json::value cr = json::parse(rerun.body);
  cr.as_object()["check_run"].as_object()["name"] = "crcr/it-org/l3/ci/build";
  cr.as_object()["check_run"].as_object()["external_id"] = "424242/1/build";
  cr.as_object()["check_run"].as_object()["app"].as_object()["id"] = std::stoll(kAppId);
  stack.Produce({"check_run", json::serialize(cr), ""}, run + "rerun");
  stack.Flush();

  EXPECT_EQ(stack.WaitForDispatches(16, 60s), 16u);
  auto calls = stack.Dispatches();
  std::map<std::string, std::set<std::string>> by_repo;  // repo -> delivery ids
  auto keys = auth::RelayTokenKeys::Parse(kTokenKeys, "it");
  for (const auto& c : calls) {
    const auto& body = c.at("body").as_object();
    const auto& cp = body.at("client_payload").as_object();
    std::string repo(c.at("repo").as_string());
    std::string delivery(cp.at("delivery_id").as_string());
    by_repo[repo].insert(delivery);
    EXPECT_EQ(body.at("event_type").as_string(), cp.at("event_type").as_string());
    EXPECT_LE(cp.size(), 10u);
    auto claims = keys->Verify(std::string(cp.at("relay_token").as_string()), std::time(nullptr));
    ASSERT_TRUE(claims.ok()) << claims.status();
    EXPECT_EQ(claims->repo, repo);
    EXPECT_EQ(claims->delivery_id, delivery);
    // The upstream payload itself, byte for byte as JSON.
    const Payload& src = delivery == run + "opened" ? opened : delivery == run + "sync" ? sync
                         : delivery == run + "closed" ? closed : push;
    EXPECT_EQ(json::serialize(cp.at("payload")), json::serialize(json::parse(src.body))) << delivery;
  }
  std::set<std::string> want = {run + "opened", run + "sync", run + "closed", run + "push"};
  for (const char* repo : {"it-org/l1", "it-org/l2", "it-org/l3", "it-org/l4"}) {
    EXPECT_EQ(by_repo[repo], want) << repo;
  }
  // The re-run, once, on the downstream repo behind the check run.
  int reruns = 0;
  json::value all_calls = stack.Fake("GET", "/_fake/calls");
  for (auto& c : all_calls.as_array()) {
    if (c.at("path").as_string() == "/repos/it-org/l3/actions/runs/424242/rerun-failed-jobs") ++reruns;
  }
  EXPECT_EQ(reruns, 1);
  // Records: a dispatch record per (delivery, repo) with its level, a label
  // fact for the crcr label, an outcome per write.
  auto dispatched = TopicRecords("relay.dispatches", run);
  EXPECT_EQ(dispatched.size(), 16u);
  for (const auto& r : dispatched) {
    v1::DispatchRecord d;
    ASSERT_TRUE(d.ParseFromString(r.value));
    EXPECT_EQ(d.upstream_repo(), stack.upstream());
    EXPECT_EQ(d.level(), d.downstream_repo().back() - '0');
    EXPECT_GT(d.dispatched_at_unix_ms(), 0);
    EXPECT_EQ(d.token_key_id(), "it1");
  }
  // The label fact is state (a compacted topic keyed by PR), published once:
  // a batch that comes again does not send it again.
  auto labels = TopicRecords("relay.pr_labels", run);
  ASSERT_GE(labels.size(), 1u);
  for (const auto& l : labels) {
    v1::PullRequestLabels facts;
    ASSERT_TRUE(facts.ParseFromString(l.value));
    EXPECT_EQ(facts.delivery_id(), run + "crcr");
    ASSERT_EQ(facts.crcr_devices_size(), 1);
    EXPECT_EQ(facts.crcr_devices(0), "xpu");
  }
  EXPECT_EQ(TopicRecords("github.outcomes", run).size(), 17u);  // 16 dispatches + 1 re-run
}

TEST_F(DispatchIT, AnOversizePayloadIsSlimmedUnder64KB) {
  DispatchStack stack("slim");
  stack.SetAllowlist("L2: [it-org/big]\n");
  ASSERT_NE(stack.StartDispatch(1), 0) << stack.Log(1);
  Payload opened = Find(corpus_, "pull_request", "opened").at(0);
  json::value doc = json::parse(opened.body);
  doc.as_object()["pull_request"].as_object()["body"] = std::string(200'000, 'x');
  std::string run = "slim-" + Unique();
  stack.Produce({"pull_request", json::serialize(doc), ""}, run);
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(1, 30s), 1u);
  auto call = stack.Dispatches().at(0);
  std::string body = json::serialize(call.at("body"));
  EXPECT_LT(body.size(), 64u * 1024);
  const auto& cp = call.at("body").at("client_payload").as_object();
  EXPECT_TRUE(cp.at("slimmed").as_bool());
  EXPECT_EQ(cp.at("payload").at("pull_request").at("head").at("sha"), doc.at("pull_request").at("head").at("sha"));
  EXPECT_EQ(cp.at("payload").at("number"), doc.at("number"));
  auto records = TopicRecords("relay.dispatches", run);
  ASSERT_EQ(records.size(), 1u);
  v1::DispatchRecord d;
  ASSERT_TRUE(d.ParseFromString(records[0].value));
  EXPECT_TRUE(d.slimmed());
}

TEST_F(DispatchIT, TheAllowlistReloadsWithoutARestartAndABadFileIsRefused) {
  DispatchStack stack("reload");
  stack.SetAllowlist("L1: [it-org/first]\n");
  uint16_t port = stack.StartDispatch(1);
  ASSERT_NE(port, 0) << stack.Log(1);
  Payload push;
  for (const auto& p : Find(corpus_, "push", "")) {
    if (p.body.find("\"deleted\": false") != std::string::npos || p.body.find("\"deleted\":false") != std::string::npos) push = p;
  }
  ASSERT_FALSE(push.body.empty());
  std::string run = "reload-" + Unique() + "-";
  stack.Produce(push, run + "1");
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(1, 30s), 1u);
  auto metric = [&](const std::string& name) { return Metric(port, name); };
  // A new repo at L4: picked up while running.
  stack.SetAllowlist("L1: [it-org/first]\nL4: [it-org/added]\n");
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (metric("relay_allowlist_repos{level=\"L4\"}") != 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  stack.Produce(push, run + "2");
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(3, 30s), 3u) << [&] {
    std::string seen;
    for (const auto& c : stack.Dispatches()) seen += json::serialize(c) .substr(0, 300) + "\n";
    return seen;
  }();
  // A bad file (a repo twice) is refused: the last good one stays.
  stack.SetAllowlist("L1: [it-org/first]\nL4: [it-org/first]\n");
  deadline = std::chrono::steady_clock::now() + 10s;
  while (metric("relay_allowlist_reloads_total{result=\"refused\"}") < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(metric("relay_allowlist_reloads_total{result=\"refused\"}"), 1);
  EXPECT_THAT(stack.Log(1), HasSubstr("allowlist change refused"));
  stack.Produce(push, run + "3");
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(5, 30s), 5u);
  std::map<std::string, int> per_repo;
  std::string seen;
  for (const auto& c : stack.Dispatches()) {
    per_repo[std::string(c.at("repo").as_string())]++;
    seen += std::string(c.at("repo").as_string()) + " " + json::serialize(c.at("body").at("client_payload").at("delivery_id")) + "; ";
  }
  EXPECT_EQ(per_repo["it-org/first"], 3) << seen;
  EXPECT_EQ(per_repo["it-org/added"], 2) << seen;
}

TEST_F(DispatchIT, PermanentFailuresAreDeadLetteredWithTheReasonAndTransientOnesRetried) {
  DispatchStack stack("errors");
  stack.SetAllowlist("L2: [it-org/ok, it-org/gone, it-org/bad, it-org/flaky]\n");
  stack.Fake("POST", "/_fake/config", R"({"not_installed":["it-org/gone"]})");
  stack.Fake("POST", "/_fake/faults", R"({"path":"/repos/it-org/bad/dispatches","status":422,"count":-1,"message":"Invalid request"})");
  stack.Fake("POST", "/_fake/faults", R"({"path":"/repos/it-org/flaky/dispatches","status":502,"count":2})");
  ASSERT_NE(stack.StartDispatch(1), 0) << stack.Log(1);
  std::string run = "errors-" + Unique();
  stack.Produce(Find(corpus_, "pull_request", "opened").at(0), run);
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(2, 60s, 3s), 2u);  // ok, and flaky after two 502s
  auto dead = TopicRecords("github.requests.dlq", run);
  std::map<std::string, std::string> reason;
  for (const auto& r : dead) {
    v1::GitHubRequest req;
    ASSERT_TRUE(req.ParseFromString(r.value));
    reason[req.repo()] = *r.FindHeader("relay-dlq-reason");
  }
  ASSERT_EQ(reason.size(), 2u);
  EXPECT_THAT(reason["it-org/gone"], HasSubstr("not installed"));
  EXPECT_THAT(reason["it-org/bad"], HasSubstr("HTTP 422"));
  int flaky_attempts = 0;
  for (const auto& r : TopicRecords("github.outcomes", run)) {
    v1::GitHubOutcome o;
    ASSERT_TRUE(o.ParseFromString(r.value));
    if (o.repo() == "it-org/flaky") flaky_attempts = o.attempts();
  }
  EXPECT_EQ(flaky_attempts, 3);
}

TEST_F(DispatchIT, NoExamplePayloadCrashesIt) {
  DispatchStack stack("corpus");
  stack.SetAllowlist(kFourLevels);
  uint16_t port = stack.StartDispatch(1);
  ASSERT_NE(port, 0) << stack.Log(1);
  std::string run = "corpus-" + Unique() + "-";
  for (size_t i = 0; i < corpus_.size(); ++i) stack.Produce(corpus_[i], run + std::to_string(i));
  stack.ProduceRaw("github.requests", "not a record at all");
  stack.Flush();
  stack.WaitForDispatches(4, 60s, 3s);
  EXPECT_TRUE(stack.dispatch(1).Running());
  EXPECT_EQ(HttpClient("127.0.0.1", port).Get("/readyz").status, 200);
  std::string m = HttpClient("127.0.0.1", port).Get("/metrics").body;
  EXPECT_THAT(m, HasSubstr("relay_dispatch_events_total{event=\"issues\",outcome=\"ignored\"}"));
}

TEST_F(DispatchIT, RequestsFromOtherServicesAreCarriedOutUnderTheSameBudget) {
  DispatchStack stack("requests");
  stack.SetAllowlist(kFourLevels);
  ASSERT_NE(stack.StartDispatch(1), 0) << stack.Log(1);
  std::string run = "requests-" + Unique() + "-";
  auto request = [&](const std::string& id) {
    v1::GitHubRequest r;
    r.set_id(run + id);
    r.set_repo(stack.upstream());
    r.set_level(3);
    r.set_delivery_id(run + "d");
    return r;
  };
  // A check run in progress, then completed: one check run, updated.
  for (const char* status : {"in_progress", "completed"}) {
    v1::GitHubRequest r = request(std::string("check-") + status);
    auto* c = r.mutable_check_run();
    c->set_name("crcr/it-org/l3/ci/build");
    c->set_head_sha("0123456789abcdef0123456789abcdef01234567");
    c->set_external_id("777/1/build");
    c->set_status(status);
    if (std::string(status) == "completed") c->set_conclusion("success");
    c->set_details_url("https://github.com/it-org/l3/actions/runs/777");
    stack.ProduceRaw("github.requests", r.SerializeAsString());
    stack.Flush();
    // One after the other, as the collector would send them.
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (TopicRecords("github.outcomes", run).size() < (std::string(status) == "completed" ? 2u : 1u) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(200ms);
    }
  }
  // A PR comment, twice: found again by its marker, never a second one.
  for (const char* text : {"first", "second"}) {
    v1::GitHubRequest r = request(std::string("comment-") + text);
    r.mutable_comment()->set_issue_number(7);
    r.mutable_comment()->set_marker("<!-- relay:it -->");
    r.mutable_comment()->set_body(std::string("<!-- relay:it -->\n") + text);
    stack.ProduceRaw("github.requests", r.SerializeAsString());
    stack.Flush();
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (TopicRecords("github.outcomes", run).size() < (std::string(text) == "second" ? 4u : 3u) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(200ms);
    }
  }
  std::map<std::string, int> endpoints;
  json::value calls = stack.Fake("GET", "/_fake/calls");
  for (auto& c : calls.as_array()) endpoints[std::string(c.at("endpoint").as_string())]++;
  EXPECT_EQ(endpoints["POST /repos/{owner}/{repo}/check-runs"], 1);
  EXPECT_EQ(endpoints["PATCH /repos/{owner}/{repo}/check-runs/{id}"], 1);
  EXPECT_EQ(endpoints["POST /repos/{owner}/{repo}/issues/{id}/comments"], 1);
  EXPECT_EQ(endpoints["PATCH /repos/{owner}/{repo}/issues/comments/{id}"], 1);
  for (const auto& r : TopicRecords("github.outcomes", run)) {
    v1::GitHubOutcome o;
    ASSERT_TRUE(o.ParseFromString(r.value));
    EXPECT_EQ(o.result(), "done") << o.request_id() << " " << o.error();
  }
}

// The write economy on the real broker. Subscriptions: it-org/l1 asks for
// pushes only, so a PR's dispatches never reach it (counted as filtered).
// Coalescing: GitHub held back (one call at a time, each 200 ms late), so
// writes queue while six newer heads of one PR arrive: every repository
// gets the newest head once, each older (head, repository) is either sent
// or recorded superseded (an outcome and a SUPERSEDED ledger entry, never
// a call), none is lost, and relayctl status shows both counts.
TEST_F(DispatchIT, SubscriptionsFilterAndANewerHeadSupersedesQueuedDispatches) {
  DispatchStack stack("economy");
  stack.SetAllowlist(std::string(kFourLevels) + "subscriptions:\n  it-org/l1: {events: [push]}\n");
  stack.Fake("POST", "/_fake/config", R"({"latency_ms":200})");
  uint16_t port = stack.StartDispatch(1, {{"RELAY_GITHUB_MAX_CONCURRENCY", "1"}});
  ASSERT_NE(port, 0) << stack.Log(1);
  std::string run = "economy-" + Unique() + "-";
  Payload sync = Find(corpus_, "pull_request", "synchronize").at(0);
  constexpr int kHeads = 6;
  const std::string newest(40, 'a' + kHeads - 1);
  for (int i = 0; i < kHeads; ++i) {
    json::value doc = json::parse(sync.body);
    doc.as_object()["pull_request"].as_object()["head"].as_object()["sha"] = std::string(40, static_cast<char>('a' + i));
    stack.Produce({"pull_request", json::serialize(doc), ""}, run + std::to_string(i));
  }
  stack.Flush();
  const std::vector<std::string> repos = {"it-org/l2", "it-org/l3", "it-org/l4"};
  // Every (head, repo) ends: sent, or superseded. Wait for the newest
  // head's three (not for the calls to pause: a stall on a loaded machine
  // is no end), then for the outcomes of all 18.
  std::map<std::pair<std::string, std::string>, int> sent;  // (repo, head) -> calls
  auto newest_sent = [&] {
    sent.clear();
    for (const auto& c : stack.Dispatches()) {
      const auto& cp = c.at("body").at("client_payload").as_object();
      std::string delivery(cp.at("delivery_id").as_string());
      if (delivery.rfind(run, 0) != 0) continue;
      std::string head(cp.at("payload").at("pull_request").at("head").at("sha").as_string());
      ++sent[{std::string(c.at("repo").as_string()), head}];
    }
    return std::all_of(repos.begin(), repos.end(), [&](const std::string& r) { return sent.count({r, newest}) > 0; });
  };
  EXPECT_TRUE(relay::testing::WaitFor(newest_sent, 90s, 200ms)) << "the newest head did not reach every repository";
  for (const auto& repo : repos) EXPECT_EQ((sent[{repo, newest}]), 1) << repo << " did not get the newest head once";
  for (const auto& [key, n] : sent) {
    EXPECT_NE(key.first, "it-org/l1") << "dispatched to a repository that asked for pushes only";
    EXPECT_EQ(n, 1) << key.first << " " << key.second;
  }
  std::map<std::string, std::string> result;  // request id -> outcome
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (result.size() < repos.size() * kHeads && std::chrono::steady_clock::now() < deadline) {
    for (const auto& r : TopicRecords("github.outcomes", run)) {
      v1::GitHubOutcome o;
      ASSERT_TRUE(o.ParseFromString(r.value));
      result[o.request_id()] = o.result();
      // A dispatch's outcome names its commit, so the HUD grid can place a
      // superseded one (it has no relay.dispatches record).
      EXPECT_EQ(o.head_sha().size(), 40u) << o.request_id();
      EXPECT_FALSE(o.upstream_repo().empty()) << o.request_id();
      if (o.result() == "superseded") {
        EXPECT_THAT(o.error(), HasSubstr("superseded by"));
        EXPECT_THAT(o.error(), HasSubstr(o.superseded_by()));
        EXPECT_NE(o.head_sha(), newest) << "the newest head always goes out";
      } else {
        EXPECT_EQ(o.superseded_by(), "");
      }
    }
    if (result.size() < repos.size() * kHeads) std::this_thread::sleep_for(500ms);
  }
  ASSERT_EQ(result.size(), repos.size() * kHeads) << "a write of the six heads never ended";
  size_t superseded = 0, done = 0;
  for (const auto& [id, r] : result) {
    superseded += r == "superseded";
    done += r == "done";
  }
  size_t calls = 0;
  for (const auto& [key, n] : sent) calls += n;
  EXPECT_EQ(done, calls) << "every write done was one call";
  EXPECT_EQ(superseded + done, repos.size() * kHeads);
  EXPECT_GE(superseded, 1u) << "nothing was superseded though GitHub was held back";
  std::set<std::string> ledger_superseded;
  for (const auto& r : TopicRecords("dispatch.ledger", run)) {
    v1::LedgerEntry e;
    ASSERT_TRUE(e.ParseFromString(r.value));
    if (e.state() == v1::LedgerEntry::SUPERSEDED) ledger_superseded.insert(e.request_id());
  }
  EXPECT_EQ(ledger_superseded.size(), superseded);
  CtlRun status = Relayctl("--json status --service dispatch=http://127.0.0.1:" + std::to_string(port));
  auto report = json::parse(status.out);
  EXPECT_EQ(report.at("github").at("superseded").as_double(), static_cast<double>(superseded)) << status.out;
  EXPECT_EQ(report.at("github").at("filtered").as_double(), kHeads) << "it-org/l1's six, by subscription";
}

}  // namespace
}  // namespace relay::dispatch_it
