// Structured logs: one JSON object per line on stderr, e.g.
//   {"ts":"2026-11-22T03:23:21.123Z","level":"info","msg":"listening","port":8080}
// Thread-safe. Never pass secrets as fields: there is no redaction here.
#pragma once

#include <initializer_list>
#include <string_view>
#include <utility>

#include <boost/json/value.hpp>
#include <boost/json/value_from.hpp>

namespace relay::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// A key and any value boost::json::value_from accepts (strings, numbers, bools).
struct Field {
  template <typename T>
  Field(std::string_view k, T&& v) : key(k), value(boost::json::value_from(std::forward<T>(v))) {}
  std::string_view key;
  boost::json::value value;
};

// Messages below `level` are dropped. Default: kInfo.
void SetLevel(Level level);
// Parses "debug" | "info" | "warn" | "error"; false when unknown.
bool ParseLevel(std::string_view text, Level* level);
bool Enabled(Level level);

void Write(Level level, std::string_view msg, std::initializer_list<Field> fields = {});

inline void Debug(std::string_view msg, std::initializer_list<Field> fields = {}) {
  if (Enabled(Level::kDebug)) Write(Level::kDebug, msg, fields);
}
inline void Info(std::string_view msg, std::initializer_list<Field> fields = {}) {
  Write(Level::kInfo, msg, fields);
}
inline void Warn(std::string_view msg, std::initializer_list<Field> fields = {}) {
  Write(Level::kWarn, msg, fields);
}
inline void Error(std::string_view msg, std::initializer_list<Field> fields = {}) {
  Write(Level::kError, msg, fields);
}

}  // namespace relay::log
