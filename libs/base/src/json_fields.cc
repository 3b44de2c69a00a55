#include "relay/base/json_fields.h"

namespace relay {

namespace json = boost::json;

const json::object* ObjectField(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v ? v->if_object() : nullptr;
}

const json::object* ObjectField(const json::object* o, std::string_view key) {
  return o ? ObjectField(*o, key) : nullptr;
}

std::string_view StringField(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v || !v->is_string()) return {};
  const json::string& s = v->get_string();
  return {s.data(), s.size()};
}

std::string_view StringField(const json::object* o, std::string_view key) {
  return o ? StringField(*o, key) : std::string_view();
}

int64_t IntField(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v) return 0;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->get_uint64());
  return 0;
}

int64_t IntField(const json::object* o, std::string_view key) { return o ? IntField(*o, key) : 0; }

std::string JsonQuote(std::string_view s) { return json::serialize(json::string_view(s.data(), s.size())); }

}  // namespace relay
