// relay-canary: a simulated downstream CI for the dev stack. It watches the
// repository_dispatch calls the fake GitHub received and answers each one
// the way a downstream workflow using the public cross-repo-ci-relay-callback
// action does: in_progress then completed for every leg of a job matrix,
// with OIDC tokens from a dev issuer (an RSA key whose JWKS the collector
// trusts) and the client payload echoed whole. A deterministic mix adds
// failures, cancellations, re-run attempts, duplicate and out-of-order
// callbacks; each callback knows the status the relay must answer, and the
// run fails when any answer differs.
//
//   relay-canary jwks --key PEM --kid KID          print the issuer's JWKS
//   relay-canary run --github URL --collector URL --key PEM --kid KID
//                    --issuer ISS --audience AUD [--idle SECONDS] [--seed N]
//                    [--skip-calls N]   (calls the fake got before this run)
//                    [--cases N]        (test cases per JUnit report; 0: none)
//                    [--chaos-log FILE] (the fault-injection suite, tools/chaos:
//                    in_progress then completed for every leg, each callback
//                    retried on no answer, 429 and 5xx until the relay decides
//                    it, for up to --retry-for SECONDS (600); one JSON line per
//                    callback to FILE with its identity, answer and tries)
//   relay-canary mint-corpus --key PEM --kid KID --issuer ISS --audience AUD
//                    --token-keys FILE --org ORG --repos N --count N --out DIR
//                    pre-minted callbacks for relay-loadgen (benchmarks): each
//                    a distinct job's in_progress with its own OIDC token and
//                    a relay token for its delivery and repo
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <boost/json.hpp>
#include <boost/url.hpp>

#include "relay/auth/jwt.h"
#include "relay/auth/oidc.h"
#include "relay/auth/relay_token.h"
#include "relay/http/client.h"

namespace {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
using namespace std::chrono_literals;

// A query-parameter value, percent-encoded.
std::string QueryEncode(const std::string& in) { return boost::urls::encode(in, boost::urls::unreserved_chars); }

[[noreturn]] void Die(const std::string& why) {
  std::cerr << "relay-canary: " << why << "\n";
  std::exit(2);
}

std::map<std::string, std::string> Flags(int argc, char** argv, int from) {
  std::map<std::string, std::string> out;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) Die("bad argument " + a);
    out[a.substr(2)] = argv[++i];
  }
  return out;
}

std::string Need(const std::map<std::string, std::string>& f, const std::string& k) {
  auto it = f.find(k);
  if (it == f.end()) Die("--" + k + " is required");
  return it->second;
}

int64_t NowS() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Tally {
  std::map<std::string, int> by_kind;  // "<what> -> <status>"
  int unexpected = 0;
};

class Canary {
 public:
  Canary(std::map<std::string, std::string> f)
      : issuer_(Need(f, "issuer")), audience_(Need(f, "audience")), kid_(Need(f, "kid")),
        rng_(static_cast<uint32_t>(std::stoul(f.count("seed") ? f["seed"] : "1"))) {
    auto key = relay::auth::RsaKey::LoadPem(Need(f, "key"));
    if (!key.ok()) Die(std::string(key.status().message()));
    key_ = *key;
    auto gh = relay::http::Client::New(Need(f, "github"));
    auto col = relay::http::Client::New(Need(f, "collector"));
    if (!gh.ok() || !col.ok()) Die("bad --github or --collector URL");
    github_ = std::move(*gh);
    collector_ = std::move(*col);
    seen_ = std::stoul(f.count("skip-calls") ? f["skip-calls"] : "0");
    // Token ids must never repeat across runs (the relay refuses a token
    // that already carried a callback); the outcome mix stays seeded.
    std::random_device rd;
    run_id_ = std::to_string(rd()) + std::to_string(rd());
    // Workflow run ids are unique across runs too, as GitHub's are (the
    // HUD's views join jobs to runs by id): the start time in ms, x1000.
    run_base_ = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count() * 1000;
    cases_ = std::stoi(f.count("cases") ? f["cases"] : "3000");
    if (f.count("chaos-log")) {
      chaos_log_.open(f["chaos-log"], std::ios::app);
      if (!chaos_log_) Die("cannot open --chaos-log " + f["chaos-log"]);
      retry_for_ = std::chrono::seconds(std::stoi(f.count("retry-for") ? f["retry-for"] : "600"));
    }
  }

  // Answers every dispatch not answered yet; true when there were any.
  bool Round() {
    // A page at a time: the calls carry whole payloads, and a backlog of
    // thousands is more than one response may hold.
    constexpr size_t kPage = 200;
    auto r = github_->Send(bhttp::verb::get,
                           "/_fake/calls?since=" + std::to_string(seen_) + "&limit=" + std::to_string(kPage), {}, "");
    if (!r.ok() || r->status != 200) {
      // Under the fault-injection suite the machine is loaded: ask again
      // (not idle: the calls are still to come).
      if (chaos_log_.is_open()) return true;
      Die("fake GitHub /_fake/calls failed");
    }
    boost::system::error_code ec;
    json::value calls = json::parse(r->body, ec);
    if (ec || !calls.is_array()) Die("fake GitHub /_fake/calls is not a JSON array");
    bool any = false;
    const auto& fresh = calls.as_array();
    seen_ += fresh.size();
    for (const auto& call : fresh) {
      const auto& c = call.as_object();
      if (c.at("endpoint").as_string() != "POST /repos/{owner}/{repo}/dispatches" || c.at("status").as_int64() != 204) continue;
      const json::value* payload = c.at("body").as_object().if_contains("client_payload");
      if (!payload || !payload->is_object()) continue;
      if (chaos_log_.is_open()) {
        ChaosAnswer(std::string(c.at("repo").as_string()), payload->as_object());
      } else {
        Answer(std::string(c.at("repo").as_string()), payload->as_object());
      }
      any = true;
    }
    return any || fresh.size() == kPage;
  }

  const Tally& tally() const { return tally_; }
  int64_t reported_cases() const { return reported_cases_; }
  int dispatches() const { return dispatches_; }

 private:
  std::string Oidc(const std::string& repo, int64_t lifetime_s = 300) {
    int64_t now = NowS();
    json::object claims{{"iss", issuer_}, {"aud", audience_}, {"sub", "repo:" + repo + ":ref:refs/heads/main"},
                        {"repository", repo}, {"repository_id", std::to_string(std::hash<std::string>{}(repo) % 100000000)},
                        {"jti", run_id_ + "-" + std::to_string(++minted_)},
                        {"iat", now}, {"nbf", now}, {"exp", now + lifetime_s}};
    return *relay::auth::SignRs256(claims, key_, kid_);
  }

  // One callback; `expect` is the status the relay must answer (an L1 repo
  // is acknowledged with 200 whatever it says).
  void Post(const std::string& repo, const json::object& client_payload, const json::object& workflow, int expect,
            const std::string& what) {
    json::object body = client_payload;  // echoed whole, as the action does
    body["workflow"] = workflow;
    auto r = collector_->Send(bhttp::verb::post, "/github/callback",
                              {{"Authorization", "Bearer " + Oidc(repo)}, {"Content-Type", "application/json"}},
                              json::serialize(body));
    int got = r.ok() ? static_cast<int>(r->status) : 0;
    bool ignored = r.ok() && r->body.find("\"ignored\"") != std::string::npos;
    std::string kind = what + " -> " + (ignored ? "200 ignored (L1)" : std::to_string(got));
    tally_.by_kind[kind]++;
    if (!ignored && got != expect) {
      tally_.unexpected++;
      std::cerr << "unexpected: " << repo << " " << what << ": " << got << " (wanted " << expect << ") "
                << (r.ok() ? r->body : std::string(r.status().message())) << "\n";
    }
  }

  // A job's JUnit report as pytest writes it, posted to /github/test-report
  // with the dispatch's relay token.
  void UploadReport(const std::string& repo, const json::object& payload, const std::string& run_id, int attempt,
                    const std::string& job, const std::string& conclusion) {
    std::string xml = R"(<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">)";
    xml.reserve(static_cast<size_t>(cases_) * 150);
    for (int i = 0; i < cases_; ++i) {
      xml += R"(<testcase classname="test_ops.TestCommon" name="test_op_)" + std::to_string(i) +
             R"(" file="test/test_ops.py" time="0.)" + std::to_string(rng_() % 1000) + "\"";
      if (conclusion == "failure" && i % 997 == 1) {
        xml += R"(><failure message="AssertionError: Tensor-likes are not close!">Traceback ...</failure></testcase>)";
      } else if (i % 50 == 7) {
        xml += R"(><skipped message="not supported on this backend"/></testcase>)";
      } else {
        xml += "/>";
      }
    }
    xml += "</testsuite></testsuites>";
    const json::value* token = payload.if_contains("relay_token");
    std::map<std::string, std::string> headers = {{"Authorization", "Bearer " + Oidc(repo)},
                                                  {"Content-Type", "application/xml"}};
    if (token && token->is_string()) headers["X-Relay-Token"] = std::string(token->as_string());
    std::string delivery = payload.contains("delivery_id") ? std::string(payload.at("delivery_id").as_string()) : "";
    std::string target = "/github/test-report?delivery_id=" + delivery + "&run_id=" + run_id +
                         "&run_attempt=" + std::to_string(attempt) + "&job_name=" + QueryEncode(job);
    auto r = collector_->Send(bhttp::verb::post, target, headers, xml);
    int got = r.ok() ? static_cast<int>(r->status) : 0;
    bool ignored = r.ok() && r->body.find("\"ignored\"") != std::string::npos;
    tally_.by_kind[std::string("JUnit report (") + std::to_string(cases_) + " cases) -> " +
                   (ignored ? "200 ignored (L1)" : std::to_string(got))]++;
    if (!ignored && got != 202) {
      tally_.unexpected++;
      std::cerr << "unexpected: " << repo << " report: " << got << " " << (r.ok() ? r->body : std::string(r.status().message())) << "\n";
    } else if (!ignored) {
      reported_cases_ += cases_;
    }
  }


  static json::object Workflow(const std::string& run_id, int attempt, const std::string& job, const std::string& status,
                               const std::string& conclusion) {
    json::object w{{"schema_version", "1"}, {"status", status},
                   {"conclusion", status == "completed" ? json::value(conclusion) : json::value(nullptr)},
                   {"name", "canary-ci"}, {"url", "https://github.com/canary/actions/runs/" + run_id},
                   {"run_id", run_id}, {"run_attempt", std::to_string(attempt)}, {"job_name", job},
                   {"check_run_id", run_id + "-" + std::to_string(attempt)},
                   {"started_at", "2026-11-23T00:00:00Z"}, {"completed_at", nullptr}};
    if (status == "completed") {
      bool failed = conclusion == "failure";
      w["test_results"] = json::object{{"passed", 950}, {"failed", failed ? 3 : 0}, {"skipped", 47}};
    }
    return w;
  }

  // The fault-injection suite's downstream: every leg in_progress then
  // completed, each callback sent until the relay decides it, as a
  // workflow's retrying callback step would. What the relay answered goes to the chaos log,
  // which tools/chaos/run counts against ClickHouse.
  void ChaosAnswer(const std::string& repo, const json::object& payload) {
    ++dispatches_;
    std::string run_id = std::to_string(run_base_ + dispatches_);
    std::string delivery = payload.contains("delivery_id") ? std::string(payload.at("delivery_id").as_string()) : "";
    int legs = 1 + static_cast<int>(rng_() % 3);
    for (int leg = 0; leg < legs; ++leg) {
      std::string job = "test (" + std::to_string(leg + 1) + ", " + std::to_string(legs) + ")";
      uint32_t roll = rng_() % 100;
      std::string conclusion = roll < 85 ? "success" : roll < 95 ? "failure" : "cancelled";
      for (const char* status : {"in_progress", "completed"}) {
        json::object body = payload;
        body["workflow"] = Workflow(run_id, 1, job, status, conclusion);
        std::string text = json::serialize(body);
        // One token per callback, sent again with every retry: the relay
        // knows a retry by its token (a fresh token is a new callback).
        // It outlives the retries.
        std::string token = Oidc(repo, std::chrono::duration_cast<std::chrono::seconds>(retry_for_).count() + 300);
        auto deadline = std::chrono::steady_clock::now() + retry_for_;
        auto backoff = 200ms;
        int tries = 0, got = 0;
        std::string answer;
        for (;;) {
          ++tries;
          auto r = collector_->Send(bhttp::verb::post, "/github/callback",
                                    {{"Authorization", "Bearer " + token}, {"Content-Type", "application/json"}}, text);
          got = r.ok() ? static_cast<int>(r->status) : 0;
          answer = r.ok() ? r->body : std::string(r.status().message());
          bool retry = got == 0 || got == 429 || got >= 500;
          if (!retry || std::chrono::steady_clock::now() + backoff > deadline) break;
          std::this_thread::sleep_for(backoff);
          backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
        }
        std::string kind = std::string(status) + " -> " + std::to_string(got);
        tally_.by_kind[kind]++;
        if (got != 200) {
          tally_.unexpected++;
          std::cerr << "unexpected: " << repo << " " << status << ": " << got << " " << answer << "\n";
        }
        json::object line{{"delivery_id", delivery}, {"repo", repo}, {"run_id", run_id}, {"run_attempt", "1"},
                          {"job_name", job}, {"status", status}, {"conclusion", conclusion}, {"http", got},
                          {"tries", tries}};
        boost::system::error_code ec;
        json::value parsed = json::parse(answer, ec);
        if (!ec && parsed.is_object() && parsed.as_object().contains("status")) line["outcome"] = parsed.at("status");
        chaos_log_ << json::serialize(line) << "\n";
        chaos_log_.flush();
      }
    }
  }

  void Answer(const std::string& repo, const json::object& payload) {
    ++dispatches_;
    std::string run_id = std::to_string(run_base_ + dispatches_);
    int legs = 1 + static_cast<int>(rng_() % 3);
    for (int leg = 0; leg < legs; ++leg) {
      std::string job = "test (" + std::to_string(leg + 1) + ", " + std::to_string(legs) + ")";
      uint32_t roll = rng_() % 100;
      std::string conclusion = roll < 80 ? "success" : roll < 91 ? "failure" : roll < 95 ? "cancelled" : "timed_out";
      if (rng_() % 13 == 0) Post(repo, payload, Workflow(run_id, 1, job, "completed", conclusion), 409, "completed before in_progress");
      Post(repo, payload, Workflow(run_id, 1, job, "in_progress", ""), 200, "in_progress");
      if (rng_() % 11 == 0) Post(repo, payload, Workflow(run_id, 1, job, "in_progress", ""), 409, "duplicate in_progress");
      if (roll >= 98) {
        // The runner died: no completion is ever reported; the relay's
        // sweeper times the job out after collector.zombie_timeout.
        Post(repo, payload, Workflow(run_id, 1, job, "in_progress", ""), 409, "duplicate in_progress");
        continue;
      }
      if (cases_ > 0) UploadReport(repo, payload, run_id, 1, job, conclusion);
      Post(repo, payload, Workflow(run_id, 1, job, "completed", conclusion), 200, "completed " + conclusion);
      if (rng_() % 10 == 0) Post(repo, payload, Workflow(run_id, 1, job, "completed", conclusion), 409, "duplicate completed");
      if (conclusion == "failure" && rng_() % 2 == 0) {
        // Re-run failed jobs: attempt 2 is a job of its own.
        Post(repo, payload, Workflow(run_id, 2, job, "in_progress", ""), 200, "re-run in_progress");
        Post(repo, payload, Workflow(run_id, 2, job, "completed", "success"), 200, "re-run completed success");
      }
    }
  }

  std::string issuer_, audience_, kid_;
  relay::auth::RsaKey key_;
  std::mt19937 rng_;
  std::unique_ptr<relay::http::Client> github_, collector_;
  size_t seen_ = 0;
  int cases_ = 3000;
  std::string run_id_;
  int dispatches_ = 0;
  int64_t run_base_ = 0;
  int64_t minted_ = 0;
  Tally tally_;
  int64_t reported_cases_ = 0;
  std::ofstream chaos_log_;
  std::chrono::seconds retry_for_{600};
};

// Signing is the slow part (an RS256 signature is ~220 µs): both cores.
int MintCorpus(std::map<std::string, std::string> f) {
  auto key = relay::auth::RsaKey::LoadPem(Need(f, "key"));
  if (!key.ok()) Die(std::string(key.status().message()));
  auto keys = relay::auth::RelayTokenKeys::Load(Need(f, "token-keys"));
  if (!keys.ok()) Die(std::string(keys.status().message()));
  std::string out = Need(f, "out"), org = Need(f, "org"), kid = Need(f, "kid");
  std::string issuer = Need(f, "issuer"), audience = Need(f, "audience");
  int repos = std::stoi(Need(f, "repos")), count = std::stoi(Need(f, "count"));
  int64_t now = NowS();
  std::vector<std::string> lines(count);
  auto work = [&](int from, int step) {
    for (int i = from; i < count; i += step) {
      std::string repo = org + "/r" + std::to_string(i % repos);
      std::string delivery = "bench-" + std::to_string(now) + "-" + std::to_string(i);
      json::object claims{{"iss", issuer}, {"aud", audience}, {"repository", repo}, {"repository_id", "1"},
                          {"jti", delivery}, {"iat", now}, {"nbf", now}, {"exp", now + 3600}};
      std::string oidc = *relay::auth::SignRs256(claims, *key, kid);
      json::object body{{"event_type", "pull_request"},
                        {"delivery_id", delivery},
                        {"payload", json::object{{"number", 1 + i % 5000},
                                                 {"repository", json::object{{"full_name", "pytorch/pytorch"}}},
                                                 {"pull_request", json::object{{"head", json::object{{"sha", "abc"}}}}}}},
                        {"relay_token", keys->Sign(delivery, repo, now, 7 * 24 * 3600)},
                        {"workflow", json::object{{"schema_version", "1"}, {"status", "in_progress"}, {"conclusion", nullptr},
                                                  {"name", "bench"}, {"url", "https://example.test/run"},
                                                  {"run_id", std::to_string(1000 + i)}, {"run_attempt", "1"},
                                                  {"job_name", "test"}, {"check_run_id", std::to_string(1000 + i) + "-1"}}}};
      std::string file = "c" + std::to_string(i) + ".json";
      std::ofstream(out + "/" + file) << json::serialize(body);
      lines[i] = "-\t" + file + "\t-\tAuthorization: Bearer " + oidc;
    }
  };
  std::thread other(work, 1, 2);
  work(0, 2);
  other.join();
  std::ofstream manifest(out + "/manifest.tsv");
  for (const auto& l : lines) manifest << l << "\n";
  std::cout << count << " callbacks for " << repos << " repos in " << out << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Die("usage: relay-canary jwks|run --flags (see the source's header)");
  std::string cmd = argv[1];
  auto flags = Flags(argc, argv, 2);
  if (cmd == "jwks") {
    auto key = relay::auth::RsaKey::LoadPem(Need(flags, "key"));
    if (!key.ok()) Die(std::string(key.status().message()));
    auto jwk = relay::auth::ToJwk(*key, Need(flags, "kid"));
    if (!jwk.ok()) Die(std::string(jwk.status().message()));
    std::cout << json::serialize(json::object{{"keys", json::array{*jwk}}}) << "\n";
    return 0;
  }
  if (cmd == "mint-corpus") return MintCorpus(flags);
  if (cmd != "run") Die("unknown command " + cmd);
  int idle = std::stoi(flags.count("idle") ? flags["idle"] : "3");
  Canary canary(flags);
  auto last_work = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - last_work < std::chrono::seconds(idle)) {
    if (canary.Round()) last_work = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(300ms);
  }
  std::cout << "canary downstream answered " << canary.dispatches() << " dispatches; callbacks by kind and answer:\n";
  for (const auto& [kind, n] : canary.tally().by_kind) std::cout << "  " << n << "\t" << kind << "\n";
  std::cout << canary.reported_cases() << " test cases reported in JUnit uploads\n";
  std::cout << canary.tally().unexpected << " unexpected answers\n";
  return canary.tally().unexpected == 0 ? 0 : 1;
}
