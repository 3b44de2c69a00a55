#include "relay/base/config.h"
#include "relay/base/secret_file.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

extern char** environ;

namespace relay {
namespace {

// Flattens a YAML mapping into dotted keys. Sequences of scalars become lists.
absl::Status Flatten(const YAML::Node& node, const std::string& prefix,
                     std::map<std::string, std::string>* scalars,
                     std::map<std::string, std::vector<std::string>>* lists) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      std::string key = kv.first.as<std::string>();
      auto status = Flatten(kv.second, prefix.empty() ? key : prefix + "." + key, scalars, lists);
      if (!status.ok()) return status;
    }
  } else if (node.IsSequence()) {
    std::vector<std::string> items;
    for (const auto& item : node) {
      if (!item.IsScalar()) return absl::InvalidArgumentError(prefix + ": list items must be scalars");
      items.push_back(item.as<std::string>());
    }
    (*lists)[prefix] = std::move(items);
  } else if (node.IsScalar()) {
    (*scalars)[prefix] = node.as<std::string>();
  } else if (node.IsNull()) {
    (*scalars)[prefix] = "";
  }
  return absl::OkStatus();
}

// Whole text, no overflow (from_chars reports out-of-range).
bool ParseInt(std::string_view text, int64_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

std::string FormatMillis(std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; }

// Splits "25MB" into 25 and "MB".
bool SplitNumberUnit(std::string_view text, int64_t* number, std::string_view* unit) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) return false;
  *unit = text.substr(i);
  while (!unit->empty() && unit->front() == ' ') unit->remove_prefix(1);
  return ParseInt(text.substr(0, i), number);
}

}  // namespace

std::map<std::string, std::string> Config::ProcessEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    if (kv.substr(0, 6) != "RELAY_") continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

absl::StatusOr<Config> Config::Load(const std::string& path,
                                    std::map<std::string, std::string> env) {
  Config config;
  config.env_ = std::move(env);
  config.path_ = path;
  if (path.empty()) return config;
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError("config " + path + ": " + e.what());
  }
  if (!root.IsMap() && !root.IsNull()) {
    return absl::InvalidArgumentError("config " + path + ": top level must be a mapping");
  }
  try {
    auto status = Flatten(root, "", &config.file_scalars_, &config.file_lists_);
    if (!status.ok()) return absl::InvalidArgumentError("config " + path + ": " + std::string(status.message()));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError("config " + path + ": " + e.what());
  }
  return config;
}

std::string Config::EnvName(const std::string& key) {
  std::string name = "RELAY_";
  for (char c : key) name.push_back(c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return name;
}

std::optional<std::string> Config::Scalar(const std::string& key) {
  used_.insert(key);
  if (auto it = env_.find(EnvName(key)); it != env_.end()) return it->second;
  if (auto it = file_scalars_.find(key); it != file_scalars_.end()) return it->second;
  if (file_lists_.count(key)) Fail(key, "expected a single value, found a list");
  return std::nullopt;
}

void Config::Fail(const std::string& key, const std::string& why) {
  errors_.push_back(key + " (" + EnvName(key) + "): " + why);
}

std::string Config::String(const std::string& key, const std::string& def) {
  return Scalar(key).value_or(def);
}

std::string Config::RequiredString(const std::string& key) {
  auto value = Scalar(key);
  if (!value || value->empty()) {
    Fail(key, "is required");
    return "";
  }
  return *value;
}

int64_t Config::Int(const std::string& key, int64_t def, int64_t min, int64_t max) {
  auto value = Scalar(key);
  if (!value) return def;
  int64_t n = 0;
  if (!ParseInt(*value, &n)) {
    Fail(key, "'" + *value + "' is not an integer");
    return def;
  }
  if (n < min || n > max) {
    Fail(key, std::to_string(n) + " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    return def;
  }
  return n;
}

bool Config::Bool(const std::string& key, bool def) {
  auto value = Scalar(key);
  if (!value) return def;
  if (*value == "true" || *value == "1" || *value == "yes") return true;
  if (*value == "false" || *value == "0" || *value == "no") return false;
  Fail(key, "'" + *value + "' is not a boolean (true/false)");
  return def;
}

std::chrono::milliseconds Config::Duration(const std::string& key, std::chrono::milliseconds def,
                                           std::chrono::milliseconds min, std::chrono::milliseconds max) {
  auto value = Scalar(key);
  if (!value) return def;
  int64_t n = 0;
  std::string_view unit;
  if (!SplitNumberUnit(*value, &n, &unit)) {
    Fail(key, "'" + *value + "' is not a duration (e.g. 250ms, 5s, 2m, 1h)");
    return def;
  }
  static const std::map<std::string_view, int64_t> kMillis = {
      {"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}};
  auto it = kMillis.find(unit);
  if (it == kMillis.end()) {
    Fail(key, "unknown duration unit '" + std::string(unit) + "' (use ms, s, m, h)");
    return def;
  }
  int64_t ms = 0;
  if (__builtin_mul_overflow(n, it->second, &ms) || ms < min.count() || ms > max.count()) {
    Fail(key, "'" + *value + "' is outside [" + FormatMillis(min) + ", " + FormatMillis(max) + "]");
    return def;
  }
  return std::chrono::milliseconds(ms);
}

int64_t Config::Bytes(const std::string& key, int64_t def, int64_t min, int64_t max) {
  auto value = Scalar(key);
  if (!value) return def;
  int64_t n = 0;
  std::string_view unit;
  if (!SplitNumberUnit(*value, &n, &unit)) {
    Fail(key, "'" + *value + "' is not a size (e.g. 25MB, 512KiB)");
    return def;
  }
  static const std::map<std::string_view, int64_t> kUnits = {
      {"", 1},           {"B", 1},          {"KB", 1000},         {"MB", 1000 * 1000},
      {"GB", 1000'000'000}, {"KiB", 1024}, {"MiB", 1024 * 1024}, {"GiB", 1024LL * 1024 * 1024}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end()) {
    Fail(key, "unknown size unit '" + std::string(unit) + "'");
    return def;
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, it->second, &bytes) || bytes < min || bytes > max) {
    Fail(key, "'" + *value + "' is outside [" + std::to_string(min) + ", " + std::to_string(max) + "] bytes");
    return def;
  }
  return bytes;
}

std::vector<std::string> Config::StringList(const std::string& key) {
  used_.insert(key);
  if (auto it = env_.find(EnvName(key)); it != env_.end()) {
    std::vector<std::string> out;
    for (auto part : absl::StrSplit(it->second, ',', absl::SkipWhitespace())) {
      out.emplace_back(absl::StripAsciiWhitespace(absl::string_view(part.data(), part.size())));
    }
    return out;
  }
  if (auto it = file_lists_.find(key); it != file_lists_.end()) return it->second;
  if (auto it = file_scalars_.find(key); it != file_scalars_.end()) {
    return it->second.empty() ? std::vector<std::string>{} : std::vector<std::string>{it->second};
  }
  return {};
}

absl::Status Config::Finish() const {
  std::vector<std::string> errors = errors_;
  auto unknown = [&](const std::string& key) {
    if (!used_.count(key)) errors.push_back(key + ": unknown key in " + path_);
  };
  for (const auto& kv : file_scalars_) unknown(kv.first);
  for (const auto& kv : file_lists_) unknown(kv.first);
  // RELAY_* variables in a section this service reads must name a key it
  // read: RELAY_KAFKA_DELIVERY_TIMOUT would otherwise be ignored in silence.
  // Variables of other sections (RELAY_IT_*, RELAY_DEV_*, another service's
  // section) belong to other programs and pass.
  std::set<std::string> sections, known;
  for (const auto& key : used_) {
    sections.insert(EnvName(key.substr(0, key.find('.'))) + "_");
    known.insert(EnvName(key));
  }
  for (const auto& key : also_known_) known.insert(EnvName(key));
  for (const auto& [name, value] : env_) {
    if (known.count(name)) continue;
    for (const auto& section : sections) {
      if (name.rfind(section, 0) == 0) {
        errors.push_back(name + ": unknown variable (no such key in this service's configuration)");
        break;
      }
    }
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError("invalid configuration:\n  " + absl::StrJoin(errors, "\n  "));
}

std::string ReadSecretFile(Config& config, const std::string& key) {
  std::string path = config.String(key, "");
  if (path.empty()) return "";
  std::ifstream in(path);
  std::stringstream content;
  if (in) content << in.rdbuf();
  std::string secret(absl::StripTrailingAsciiWhitespace(content.str()));
  if (!in || secret.empty()) config.Fail(key, "cannot read a password from " + path);
  return secret;
}

}  // namespace relay
