// relay-stats-loadgen: writes the same test cases to Kafka twice, for the
// stats benchmark (tools/bench/stats-bench): once as relay-collector writes
// them (relay.v1.TestReportBatch, `--batch` cases per record) to
// --proto-topic, and once as JSONEachRow text (the same cases, the same
// number per record) to --json-topic, for ClickHouse's Kafka table engine.
//
//   relay-stats-loadgen --bootstrap B --rows N [--batch 2000] [--repo R]
//       [--proto-topic T] [--json-topic T] [--upload PREFIX]
//
// Prints one JSON line: rows, records, seconds, and the unix ms when the
// last record was acknowledged (the start of "time until queryable").
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <iostream>
#include <string>

#include <boost/json.hpp>

#include "absl/time/time.h"

#include "relay/kafka/producer.h"
#include "relay/v1/collector.pb.h"

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Args {
  std::string bootstrap, proto_topic, json_topic, repo = "bench/accel", upload = "bench";
  int64_t rows = 1'000'000;
  int batch = 2000;
};

const char* kOutcomes[] = {"passed", "passed", "passed", "passed", "passed", "passed", "passed", "skipped",
                           "passed", "failed"};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--bootstrap") a.bootstrap = v;
    else if (k == "--proto-topic") a.proto_topic = v;
    else if (k == "--json-topic") a.json_topic = v;
    else if (k == "--repo") a.repo = v;
    else if (k == "--upload") a.upload = v;
    else if (k == "--rows") a.rows = std::stoll(v);
    else if (k == "--batch") a.batch = std::stoi(v);
    else {
      std::cerr << "relay-stats-loadgen: unknown flag " << k << "\n";
      return 2;
    }
  }
  if (a.bootstrap.empty() || (a.proto_topic.empty() && a.json_topic.empty())) {
    std::cerr << "usage: relay-stats-loadgen --bootstrap B --rows N [--batch 2000] [--proto-topic T] [--json-topic T]\n";
    return 2;
  }
  relay::kafka::ProducerOptions po;
  po.bootstrap = a.bootstrap;
  po.client_id = "relay-stats-loadgen";
  po.linger = std::chrono::milliseconds(20);
  po.compression = "lz4";
  po.delivery_timeout = std::chrono::seconds(60);
  auto producer = relay::kafka::NewKafkaProducer(po, nullptr);
  if (!producer.ok()) {
    std::cerr << producer.status() << "\n";
    return 1;
  }
  std::atomic<int64_t> pending{0}, failed{0};
  auto done = [&](absl::Status s) {
    if (!s.ok()) failed.fetch_add(1);
    pending.fetch_sub(1);
  };
  auto start = std::chrono::steady_clock::now();
  int64_t uploaded_at = NowMs();
  absl::Time t = absl::FromUnixMillis(uploaded_at);
  std::string day = absl::FormatTime("%Y-%m-%d", t, absl::UTCTimeZone());
  std::string uploaded_text = absl::FormatTime("%Y-%m-%d %H:%M:%S", t, absl::UTCTimeZone());
  int64_t records = 0;
  for (int64_t first = 0; first < a.rows; first += a.batch) {
    int64_t n = std::min<int64_t>(a.batch, a.rows - first);
    relay::v1::TestReportBatch b;
    std::string upload = a.upload + "-" + std::to_string(first / 100'000);
    b.set_upload_id(upload);
    b.set_job_id(upload + "/job");
    b.set_repo(a.repo);
    b.set_delivery_id(a.upload);
    b.set_run_id("1");
    b.set_run_attempt("1");
    b.set_job_name("test");
    b.set_uploaded_at_unix_ms(uploaded_at);
    b.set_seq(static_cast<int32_t>((first % 100'000) / a.batch));
    std::string json;
    for (int64_t i = first; i < first + n; ++i) {
      auto* c = b.add_cases();
      c->set_file("test/test_" + std::to_string(i % 997) + ".py");
      c->set_classname("Test" + std::to_string(i % 97));
      c->set_name("test_case_" + std::to_string(i % 250'000));
      c->set_duration_s(static_cast<double>(i % 1000) / 250.0);
      c->set_outcome(kOutcomes[i % 10]);
      if (i % 10 == 9) c->set_message("AssertionError: tensors differ at index " + std::to_string(i % 64));
      if (!a.json_topic.empty()) {
        // The row the test_results table holds, as JSONEachRow.
        // 18.16's JSONEachRow wants dates and times as quoted text.
        boost::json::object row{{"day", day},
                                {"uploaded_at", uploaded_text},
                                {"repo", b.repo()},
                                {"job_id", b.job_id()},
                                {"delivery_id", b.delivery_id()},
                                {"run_id", b.run_id()},
                                {"run_attempt", b.run_attempt()},
                                {"job_name", b.job_name()},
                                {"upload_id", b.upload_id()},
                                {"seq", b.seq()},
                                {"idx", b.cases_size() - 1},
                                {"file", c->file()},
                                {"classname", c->classname()},
                                {"name", c->name()},
                                {"duration", c->duration_s()},
                                {"outcome", c->outcome()},
                                {"reruns", c->reruns()},
                                {"message", c->message()},
                                {"version", uploaded_at}};
        json += boost::json::serialize(row);
        json += '\n';
      }
    }
    if (!a.proto_topic.empty()) {
      pending.fetch_add(1);
      (*producer)->Send({a.proto_topic, b.job_id(), b.SerializeAsString(), {}}, done);
    }
    if (!a.json_topic.empty()) {
      pending.fetch_add(1);
      (*producer)->Send({a.json_topic, b.job_id(), std::move(json), {}}, done);
    }
    ++records;
    while (pending.load() > 2000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  (void)(*producer)->Flush(std::chrono::seconds(120));
  while (pending.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  int64_t acked = NowMs();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << boost::json::serialize(boost::json::object{{"rows", a.rows},
                                                          {"records", records},
                                                          {"seconds", secs},
                                                          {"last_ack_unix_ms", acked},
                                                          {"failed", failed.load()}})
            << std::endl;
  return failed.load() == 0 ? 0 : 1;
}
