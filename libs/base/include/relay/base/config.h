// Service configuration: a YAML file plus environment overrides.
//
// Keys are dotted paths into the YAML mapping ("http.listen"). The
// environment variable for a key is RELAY_ + the key upper-cased with '.'
// turned into '_' (http.listen -> RELAY_HTTP_LISTEN); it wins over the file.
// List values come from a YAML sequence or a comma-separated variable.
//
// Getters never fail: a missing key yields the default, a bad value records
// an error and yields the default. Finish() then reports every error at once,
// plus any key present in the file that no getter asked for, and any RELAY_*
// variable in a section the service reads (RELAY_HTTP_*, RELAY_KAFKA_*, ...)
// that names no key it asked for: a typo must not silently fall back to a
// default. Every number, duration and size is read with bounds, so no value
// can switch a safety off (a zero timeout that means "forever" to a library)
// or overflow. Values are never logged, so secrets can live here.
//
// Not thread-safe; use it at start-up only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace relay {

class Config {
 public:
  // Loads `path` (empty: no file, environment only). `env` maps variable
  // names to values; FromProcessEnvironment() gives the real one.
  static absl::StatusOr<Config> Load(const std::string& path,
                                     std::map<std::string, std::string> env);
  static std::map<std::string, std::string> ProcessEnvironment();

  std::string String(const std::string& key, const std::string& def);
  // A non-empty string is required.
  std::string RequiredString(const std::string& key);
  int64_t Int(const std::string& key, int64_t def, int64_t min, int64_t max);
  bool Bool(const std::string& key, bool def);
  // "250ms", "5s", "2m", "1h", or a bare number of milliseconds, within
  // [min, max] (an error otherwise).
  std::chrono::milliseconds Duration(const std::string& key, std::chrono::milliseconds def,
                                     std::chrono::milliseconds min, std::chrono::milliseconds max);
  // "25MB", "512KiB", "1024"; decimal (KB, MB, GB) and binary (KiB, MiB, GiB) units.
  int64_t Bytes(const std::string& key, int64_t def, int64_t min, int64_t max);
  std::vector<std::string> StringList(const std::string& key);

  // Records an error for `key` (a service's own cross-key check), reported
  // by Finish() with the others.
  void Fail(const std::string& key, const std::string& why);

  // Keys that other programs of the suite read: a RELAY_* variable naming
  // one of them is theirs (a shared environment), not a typo here.
  void AlsoKnown(const std::set<std::string>& keys) { also_known_.insert(keys.begin(), keys.end()); }

  // All errors from the getters, unknown file keys and unknown RELAY_*
  // variables of the sections read, or OK.
  absl::Status Finish() const;

  static std::string EnvName(const std::string& key);

  // Every key a getter asked for so far.
  const std::set<std::string>& keys_read() const { return used_; }

 private:
  std::optional<std::string> Scalar(const std::string& key);

  std::map<std::string, std::string> file_scalars_;
  std::map<std::string, std::vector<std::string>> file_lists_;
  std::map<std::string, std::string> env_;
  std::set<std::string> used_;
  std::set<std::string> also_known_;
  std::vector<std::string> errors_;
  std::string path_;
};

}  // namespace relay
