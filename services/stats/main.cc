// relay-stats: lands the relay's records in ClickHouse, and its operator
// commands.
//   relay-stats [--config FILE] [--port-file FILE]        serve (ingest, rollups)
//   relay-stats migrate [--config FILE] [--to N]          apply schema migrations
//                                                         (on a cluster: their cluster form)
//   relay-stats cluster-schema [--cluster NAME] [--database DB]
//                                                         the migrations' cluster form
//                                                         (deploy/clickhouse/cluster/relay-cluster.sql)
//   relay-stats tier-report [--config FILE] [--json]      CRCR tier health verdicts
//   relay-stats query NAME [--config FILE] [--param K=V]... [--format F]
//   relay-stats query NAME --print-sql [--param K=V]...  the SQL it would run (for 18.x)
//   relay-stats query --list                              the named dashboard queries
// Every setting can also come from RELAY_* environment variables (see
// deploy/config/stats.example.yaml). Exit codes: 0 ok, 1 failure, 2 usage.
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "relay/base/config.h"
#include "relay/base/log.h"
#include "relay/service/host.h"
#include "relay/stats/cluster_schema.h"
#include "relay/stats/migrate.h"
#include "relay/stats/sql_files.h"
#include "relay/stats/stats_service.h"
#include "relay/stats/tier_report.h"

namespace {

using relay::Config;
namespace stats = relay::stats;

int Usage(const std::string& why) {
  std::cerr << "relay-stats: " << why << "\n"
            << "usage: relay-stats [--config FILE] [--port-file FILE]\n"
            << "       relay-stats migrate [--config FILE] [--to N]\n"
            << "       relay-stats cluster-schema [--cluster NAME] [--database DB]\n"
            << "       relay-stats tier-report [--config FILE] [--json]\n"
            << "       relay-stats query NAME [--config FILE] [--param NAME=VALUE]... [--format FORMAT] [--print-sql]\n"
            << "       relay-stats query --list\n";
  return 2;
}

int Fail(const absl::Status& s) {
  std::cerr << "relay-stats: " << s.message() << "\n";
  return 1;
}

struct Args {
  std::string config_path;
  std::optional<std::string> to, format, name, cluster, database;
  std::map<std::string, std::string> params;
  bool json = false, list = false, print_sql = false;
};

// Parses the subcommand's flags; returns false (and says why) on bad usage.
bool Parse(int argc, char** argv, Args& a, std::string& why) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "--config") {
      if (!value(a.config_path)) return why = "--config needs a file", false;
    } else if (arg == "--to") {
      if (!value(v)) return why = "--to needs a version", false;
      a.to = v;
    } else if (arg == "--format") {
      if (!value(v)) return why = "--format needs a ClickHouse output format", false;
      a.format = v;
    } else if (arg == "--param") {
      if (!value(v) || v.find('=') == std::string::npos) return why = "--param needs NAME=VALUE", false;
      a.params[v.substr(0, v.find('='))] = v.substr(v.find('=') + 1);
    } else if (arg == "--cluster") {
      if (!value(v)) return why = "--cluster needs a name", false;
      a.cluster = v;
    } else if (arg == "--database") {
      if (!value(v)) return why = "--database needs a name", false;
      a.database = v;
    } else if (arg == "--json") {
      a.json = true;
    } else if (arg == "--list") {
      a.list = true;
    } else if (arg == "--print-sql") {
      a.print_sql = true;
    } else if (!arg.empty() && arg[0] != '-' && !a.name) {
      a.name = arg;
    } else {
      return why = "unknown argument " + arg, false;
    }
  }
  return true;
}

absl::StatusOr<relay::clickhouse::ClientOptions> LoadClickHouse(const std::string& path,
                                                                std::string* cluster = nullptr) {
  auto config = Config::Load(path, Config::ProcessEnvironment());
  if (!config.ok()) return config.status();
  auto options = stats::ReadClickHouseOptions(*config, cluster);
  config->AlsoKnown(relay::service::SuiteKeys());
  if (auto st = config->Finish(); !st.ok()) return st;
  return options;
}

int Migrate(const Args& a) {
  std::optional<int> to;
  if (a.to) {
    int n;
    if (!absl::SimpleAtoi(*a.to, &n)) return Usage("--to needs a number");
    to = n;
  }
  std::string cluster;
  auto options = LoadClickHouse(a.config_path, &cluster);
  if (!options.ok()) return Fail(options.status());
  auto r = stats::Migrate(*options, to, cluster);
  if (!r.ok()) return Fail(r.status());
  if (!cluster.empty()) std::cout << "on the cluster " << cluster << "\n";
  for (const auto& why : r->skipped) std::cout << "skipped " << why << "\n";
  if (r->applied.empty() && r->skipped.empty()) {
    std::cout << "schema at migration " << r->to << " in " << options->database << ": nothing to apply\n";
  } else {
    for (const auto& name : r->applied) std::cout << "applied " << name << "\n";
    std::cout << "schema at migration " << r->to << " in " << options->database << " (was " << r->from << ")\n";
  }
  return 0;
}

int ClusterSchema(const Args& a) {
  auto sql = stats::ClusterVariant({a.cluster.value_or("{cluster}"), a.database.value_or("relay")});
  if (!sql.ok()) return Fail(sql.status());
  std::cout << *sql;
  return 0;
}

int TierReport(const Args& a) {
  auto options = LoadClickHouse(a.config_path);
  if (!options.ok()) return Fail(options.status());
  auto client = relay::clickhouse::Client::New(*options);
  if (!client.ok()) return Fail(client.status());
  auto report = stats::TierReport(**client);
  if (!report.ok()) return Fail(report.status());
  std::cout << (a.json ? stats::TierReportJson(*report) : stats::TierReportTable(*report));
  return 0;
}

int Query(const Args& a) {
  if (a.list) {
    auto all = stats::EmbeddedNamedQueries();
    if (!all.ok()) return Fail(all.status());
    for (const auto& q : *all) {
      std::cout << q.name << "\t" << q.description << "\n";
      for (const auto& p : q.params) std::cout << "\t--param " << p.name << "=" << p.default_value << "  (" << p.type << ")\n";
    }
    return 0;
  }
  if (!a.name) return Usage("query needs a NAME (relay-stats query --list)");
  auto q = stats::FindQuery(*a.name);
  if (!q.ok()) return Fail(q.status());
  auto sql = stats::Bind(*q, a.params);
  if (!sql.ok()) return Fail(sql.status());
  if (a.print_sql) {
    std::cout << *sql << "\n";
    return 0;
  }
  auto options = LoadClickHouse(a.config_path);
  if (!options.ok()) return Fail(options.status());
  auto client = relay::clickhouse::Client::New(*options);
  if (!client.ok()) return Fail(client.status());
  auto out = (*client)->Query(*sql + "\nFORMAT " + a.format.value_or("PrettyCompactNoEscapes"));
  if (!out.ok()) return Fail(out.status());
  std::cout << *out;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && argv[1][0] != '-') {
    std::string cmd = argv[1];
    Args a;
    std::string why;
    if (!Parse(argc - 2, argv + 2, a, why)) return Usage(why);
    if (cmd == "migrate") return Migrate(a);
    if (cmd == "tier-report") return TierReport(a);
    if (cmd == "cluster-schema") return ClusterSchema(a);
    if (cmd == "query") return Query(a);
    return Usage("unknown command " + cmd);
  }
  return relay::service::Main(argc, argv, stats::Definition());
}
