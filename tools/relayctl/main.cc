// relayctl: the operator's tool for a relay installation (see relayctl.h).
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "relay/base/config.h"
#include "relay/kafka/security.h"
#include "relay/service/service.h"
#include "relayctl.h"

namespace {

using namespace relay::relayctl;

constexpr char kHelp[] = R"(relayctl: operate a relay installation (Kafka topics, consumer groups, dead letters,
GitHub redeliveries, clusters).

usage: relayctl [GLOBAL OPTIONS] COMMAND [ARGS]

commands:
  status                       topics and end offsets; consumer groups' lag (records, age of the
                               oldest unconsumed record); dead letters with the newest reason;
                               each service's /readyz; GitHub budget and redelivery counters
  replay TOPIC [OPTIONS]       deliver records of TOPIC again (exactly once, resumable)
      --to TOPIC                 into another topic (default: TOPIC itself)
      --partition P              only these partitions (repeat)
      --from-offset N / --to-offset N      offsets [N, M) in every chosen partition
      --from-time T / --to-time T          records written in [T, T'); T is RFC 3339
                                           (2026-11-26T10:00:00Z), 'now', or -2h / -30m / -3d
      --key K                    only records with this key (repeat)
      --rate N                   at most N records a second
      --dry-run                  count and show samples; move nothing
      --checkpoint FILE          where the replay's plan is kept (default under
                                 ~/.local/state/relayctl); the same command with an existing
                                 FILE, or --resume FILE, continues an interrupted replay
      --force                    replay into a topic not declared replay-safe
                                 (deploy/kafka/replay-safe.txt)
  replay --group G --reset-to T [--topic TOPIC]... [--dry-run] [--force]
                               move a stopped consumer group's offsets back to time T
  dlq list [--topic T.dlq]... [--reason TEXT] [--pending]
                               dead letters: reason, source topic/partition/offset, age, state
  dlq show DLQ_TOPIC OFFSET [--partition P]
                               one dead letter, its headers and its value decoded to JSON
  dlq redrive DLQ_TOPIC (--offset N... | --reason TEXT | --key K | --all) [--again] [--dry-run]
                               send dead letters back to their source topic after a fix; each
                               once (a redriven record that fails again needs --again). A dead
                               letter of github.webhooks or github.requests older than
                               dispatch.ledger's retention less a day is refused (exit 3)
  redeliveries [--limit N]     the GitHub redelivery reconciler (relay-dispatch): its last scan and
                               checkpoint, the guids it asked GitHub to deliver again, the answers
  redeliveries run [--since T] [--wait [--wait-for D]]
                               ask it to scan the App's deliveries now (default: the last 3 days);
                               --wait until a listing covered that window (default 5m; exit 1 if not)
  clusters COMMAND ...         relay-lifecycle's API (create, get, list, delete, scale, submit,
                               job, jobs, cancel, watch, wait, wait-job): `relayctl clusters help`

global options (also RELAY_KAFKA_BOOTSTRAP, RELAY_SERVICES="intake=http://h:p,dispatch=...")
  --bootstrap HOST:PORT        Kafka
  --service NAME=URL           a service's HTTP base URL, for status (repeat)
  --json                       machine output: one JSON document on stdout
  --progress / --no-progress   a progress bar with ETA on stderr (default: when stderr is a terminal)
  --timeout SECONDS            Kafka and HTTP requests (default 10)
Kafka authentication, as the services read it: RELAY_KAFKA_SECURITY_PROTOCOL
  (plaintext | ssl | sasl_plaintext | sasl_ssl), RELAY_KAFKA_SASL_MECHANISM,
  RELAY_KAFKA_SASL_USERNAME, RELAY_KAFKA_SASL_PASSWORD_FILE, RELAY_KAFKA_SSL_CA_FILE,
  RELAY_KAFKA_SSL_CERTIFICATE_FILE, RELAY_KAFKA_SSL_KEY_FILE

exit codes:
  0  done (status: everything ready)
  1  failed: Kafka or a service unreachable, a write refused (nothing half-done is hidden:
     the message says what happened and how to resume)
  2  bad input: usage, an unknown topic, group or partition, a reversed range
  3  refused: a destination not declared replay-safe (without --force), a group with members,
     a dead letter older than the dispatch ledger remembers
  4  interrupted by a signal; the checkpoint resumes it
  5  status: a service not ready
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  Context ctx;
  if (const char* b = std::getenv("RELAY_KAFKA_BOOTSTRAP")) ctx.bootstrap = b;
  if (const char* s = std::getenv("RELAY_SERVICES")) {
    for (absl::string_view item : absl::StrSplit(s, ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
      ctx.services[kv.first] = kv.second;
    }
  }
  ctx.progress = isatty(2);
  // Global options, anywhere before the subcommand's own `--` (clusters
  // passes everything after its name on untouched).
  std::vector<std::string> rest;
  std::string command;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (command == "clusters") {
      rest.push_back(a);
      continue;
    }
    auto value = [&](const std::string& name) -> std::optional<std::string> {
      if (a == name && i + 1 < args.size()) return args[++i];
      if (a.starts_with(name + "=")) return a.substr(name.size() + 1);
      return std::nullopt;
    };
    if (auto b = value("--bootstrap")) {
      ctx.bootstrap = *b;
    } else if (auto s = value("--service")) {
      auto eq = s->find('=');
      if (eq == std::string::npos) return Fail(kBadInput, "--service takes NAME=URL");
      ctx.services[s->substr(0, eq)] = s->substr(eq + 1);
    } else if (auto t = value("--timeout")) {
      int secs = 0;
      if (!absl::SimpleAtoi(*t, &secs) || secs <= 0) return Fail(kBadInput, "--timeout takes seconds");
      ctx.timeout = std::chrono::seconds(secs);
    } else if (a == "--json") {
      ctx.json = true;
    } else if (a == "--progress") {
      ctx.progress = true;
    } else if (a == "--no-progress") {
      ctx.progress = false;
    } else if (command.empty() && (a == "--help" || a == "-h" || a == "help")) {
      std::cout << kHelp;
      return kOk;
    } else if (command.empty() && !a.starts_with("-")) {
      command = a;
    } else if (command.empty()) {
      return Fail(kBadInput, "unknown option " + a + " (relayctl --help)");
    } else if (a == "--help" || a == "-h") {
      std::cout << kHelp;
      return kOk;
    } else {
      rest.push_back(a);
    }
  }
  if (command.empty()) {
    std::cerr << kHelp;
    return kBadInput;
  }
  if (command == "clusters") return Clusters(rest);
  if (ctx.bootstrap.empty()) return Fail(kBadInput, "no Kafka given: --bootstrap HOST:PORT or RELAY_KAFKA_BOOTSTRAP");
  {
    // Kafka authentication as the services read it (kafka.security_protocol
    // and the rest), from RELAY_KAFKA_* variables.
    auto config = relay::Config::Load("", relay::Config::ProcessEnvironment());
    if (!config.ok()) return Fail(kBadInput, std::string(config.status().message()));
    relay::kafka::Security security = relay::kafka::ReadSecurity(*config);
    config->AlsoKnown(relay::service::SuiteKeys());
    if (absl::Status s = config->Finish(); !s.ok()) return Fail(kBadInput, std::string(s.message()));
    relay::kafka::SetSecurity(std::move(security));
    // librdkafka takes them here or nowhere (e.g. sasl_ssl in a build
    // without TLS): say so now, not as a silently plaintext client later
    // (replay's handles set their properties unchecked).
    rd_kafka_conf_t* probe = rd_kafka_conf_new();
    absl::Status applied = relay::kafka::ApplySecurity(probe);
    rd_kafka_conf_destroy(probe);
    if (!applied.ok()) return Fail(kBadInput, std::string(applied.message()));
  }
  if (command == "status") return Status(ctx, rest);
  if (command == "replay") return Replay(ctx, rest);
  if (command == "dlq") return Dlq(ctx, rest);
  if (command == "redeliveries") return Redeliveries(ctx, rest);
  return Fail(kBadInput, "unknown command '" + command + "' (relayctl --help)");
}
