// Reading fields of Boost.JSON objects the way relay's parsers do: a field
// that is absent, null or of another type reads as empty (nullptr, "", 0),
// so a parser checks what it requires once and reads the rest plainly.
// Overloads on a pointer accept nullptr (an absent parent object).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/json.hpp>

namespace relay {

// o[key] when it is an object, else nullptr.
const boost::json::object* ObjectField(const boost::json::object& o, std::string_view key);
const boost::json::object* ObjectField(const boost::json::object* o, std::string_view key);

// o[key] when it is a string, else "". The view points into `o`.
std::string_view StringField(const boost::json::object& o, std::string_view key);
std::string_view StringField(const boost::json::object* o, std::string_view key);

// o[key] when it is an integer that fits int64, else 0.
int64_t IntField(const boost::json::object& o, std::string_view key);
int64_t IntField(const boost::json::object* o, std::string_view key);

// `s` as a JSON string literal, quotes and escapes included.
std::string JsonQuote(std::string_view s);

}  // namespace relay
