// relayctl: the operator's one tool. Subcommands live one per file
// (status.cc, replay.cc, dlq.cc, redeliveries.cc, clusters.cc: the last
// over relay-lifecycle's client); this header is what they share:
// flags, exit codes, output, time parsing, the replay-safe list.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace relay::relayctl {

// Exit codes, documented in `relayctl --help` and the README.
enum Exit : int {
  kOk = 0,
  kFailed = 1,       // Kafka or a service could not be reached, or an operation failed
  kBadInput = 2,     // usage, an unknown topic or group, a reversed range
  kRefused = 3,      // not replay-safe without --force, a group with members
  kInterrupted = 4,  // stopped by a signal; the checkpoint resumes it
  kUnhealthy = 5,    // status: a service not ready (consumer groups' lag is shown, not judged)
};

// Parsed command line of one subcommand: --name value, --name (boolean),
// positionals. A flag may repeat (All()).
class Flags {
 public:
  // `valued`: flags that take a value; `booleans`: flags that do not.
  // Anything else starting with "--" is a usage error.
  static absl::StatusOr<Flags> Parse(const std::vector<std::string>& args, const std::set<std::string>& valued,
                                     const std::set<std::string>& booleans);
  bool Has(const std::string& name) const { return named_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& def = "") const;
  std::vector<std::string> All(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::multimap<std::string, std::string> named_;
  std::vector<std::string> positional_;
};

// What every subcommand gets: where Kafka and the services are, how to
// print.
struct Context {
  std::string bootstrap;                      // --bootstrap or RELAY_KAFKA_BOOTSTRAP
  std::map<std::string, std::string> services;  // name -> base URL (--service NAME=URL, RELAY_SERVICES)
  bool json = false;                          // --json
  bool progress = false;                      // stderr is a terminal, or --progress
  std::chrono::milliseconds timeout{10'000};  // --timeout for Kafka requests
};

// One clear line on stderr ("relayctl: ..."), and the exit code.
int Fail(int code, const std::string& message);
// Exit code for a status: kBadInput for InvalidArgument/NotFound/OutOfRange,
// kRefused for FailedPrecondition, kFailed otherwise.
int FailStatus(const absl::Status& status);

// "2026-11-26T10:00:00Z" (RFC 3339), "now", or a time before now ("-2h",
// "-30m", "-3d" also as "3d ago"): unix milliseconds.
absl::StatusOr<int64_t> ParseTime(const std::string& text);
int64_t NowMs();
std::string FormatAge(int64_t ms);  // "3m12s", "2h05m", "4d01h"
std::string FormatTime(int64_t unix_ms);

// Prints a JSON value on stdout (one line).
void PrintJson(const boost::json::value& v);

// A progress line on stderr with rate and ETA, redrawn at most 4 times a
// second; nothing unless the context asks for progress.
class Progress {
 public:
  Progress(const Context& ctx, std::string what, int64_t total);
  void Update(int64_t done);
  void Finish();

 private:
  bool on_;
  std::string what_;
  int64_t total_;
  int64_t done_ = 0;
  std::chrono::steady_clock::time_point start_, last_;
};

// Topics whose every consumer is replay-safe (deploy/kafka/replay-safe.txt,
// compiled in): topic -> why.
const std::map<std::string, std::string>& ReplaySafeTopics();

// Decodes a record value by its relay-schema header (a relay.v1 message
// name) to JSON; a WebhookRecord's body is shown as its JSON text. The raw
// bytes' size and a note when the schema is unknown or the bytes do not
// parse.
boost::json::value DecodeValue(const std::string* schema, const std::string& value);

// One dead letter as `dlq list` shows it (dlq.cc).
struct DeadLetter {
  std::string dlq_topic;
  int32_t partition = 0;
  int64_t offset = 0;
  int64_t timestamp_ms = 0;
  // The earliest time known of the record: the dead letter's, or intake's
  // receipt of a webhook when earlier (redrive's bound counts from it).
  int64_t event_ms = 0;
  std::string key;
  std::string reason;        // relay-dlq-reason
  std::string source_topic;  // relay-dlq-topic, or the DLQ's name without ".dlq"
  int32_t source_partition = -1;
  int64_t source_offset = -1;
  std::string redriven_from;  // set: this record failed again after a redrive of that dead letter
  bool redriven = false;      // a later redrive marker names it
  std::string schema;
};
// Every dead letter of `dlq_topic` (redrive markers folded in, not listed).
absl::StatusOr<std::vector<DeadLetter>> ReadDeadLetters(const Context& ctx, const std::string& dlq_topic);

// GET `path` of a service: status and body; an error when unreachable.
absl::StatusOr<std::pair<unsigned, std::string>> HttpGet(const std::string& base_url, const std::string& path,
                                                         std::chrono::milliseconds timeout);
// Samples of a Prometheus text exposition: "name{labels}" -> value.
std::map<std::string, double> ParseMetrics(const std::string& text);

// Subcommands; args exclude the subcommand's name.
int Status(const Context& ctx, const std::vector<std::string>& args);
int Replay(const Context& ctx, const std::vector<std::string>& args);
int Dlq(const Context& ctx, const std::vector<std::string>& args);
int Redeliveries(const Context& ctx, const std::vector<std::string>& args);
// relay-lifecycle's API (clusters.cc): its own flags and exit codes (0, 1, 2),
// no Kafka.
int Clusters(const std::vector<std::string>& args);

}  // namespace relay::relayctl
