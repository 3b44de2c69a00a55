#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "relay/v1/cluster.pb.h"
#include "relay/v1/collector.pb.h"
#include "relay/v1/dispatch.pb.h"
#include "relay/v1/github.pb.h"
#include "relay/v1/webhook.pb.h"
#include "relayctl.h"

namespace relay::relayctl {

extern const char kReplaySafeText[];  // deploy/kafka/replay-safe.txt (generated)

absl::StatusOr<Flags> Flags::Parse(const std::vector<std::string>& args, const std::set<std::string>& valued,
                                   const std::set<std::string>& booleans) {
  Flags f;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      for (++i; i < args.size(); ++i) f.positional_.push_back(args[i]);
      break;
    }
    if (!a.starts_with("--")) {
      f.positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (booleans.count(name)) {
      if (inline_value) return absl::InvalidArgumentError("--" + name + " takes no value");
      f.named_.emplace(name, "true");
    } else if (valued.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) return absl::InvalidArgumentError("--" + name + " needs a value");
        value = args[++i];
      }
      f.named_.emplace(name, value);
    } else {
      return absl::InvalidArgumentError("unknown option --" + name);
    }
  }
  return f;
}

std::string Flags::Get(const std::string& name, const std::string& def) const {
  auto it = named_.find(name);
  return it == named_.end() ? def : it->second;
}

std::vector<std::string> Flags::All(const std::string& name) const {
  std::vector<std::string> out;
  for (auto [it, end] = named_.equal_range(name); it != end; ++it) out.push_back(it->second);
  return out;
}

int Fail(int code, const std::string& message) {
  std::cerr << "relayctl: " << message << "\n";
  return code;
}

int FailStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
      return Fail(kBadInput, std::string(status.message()));
    case absl::StatusCode::kFailedPrecondition:
      return Fail(kRefused, std::string(status.message()));
    default:
      return Fail(kFailed, std::string(status.message()));
  }
}

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

absl::StatusOr<int64_t> ParseTime(const std::string& text) {
  if (text == "now") return NowMs();
  std::string t = text;
  bool ago = false;
  if (t.starts_with("-")) {
    t = t.substr(1);
    ago = true;
  } else if (t.ends_with(" ago")) {
    t = t.substr(0, t.size() - 4);
    ago = true;
  }
  if (ago) {
    // absl durations know h, m, s; days are the operator's common case.
    absl::Duration d;
    int64_t days = 0;
    if (t.ends_with("d") && absl::SimpleAtoi(t.substr(0, t.size() - 1), &days) && days >= 0) {
      d = absl::Hours(24 * days);
    } else if (!absl::ParseDuration(t, &d) || d < absl::ZeroDuration()) {
      return absl::InvalidArgumentError("cannot read the time '" + text + "' (e.g. -2h, -30m, -3d)");
    }
    return absl::ToUnixMillis(absl::Now() - d);
  }
  absl::Time at;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, &at, &err)) {
    return absl::InvalidArgumentError("cannot read the time '" + text +
                                      "' (RFC 3339 as 2026-11-26T10:00:00Z, 'now', or -2h / -30m / -3d)");
  }
  return absl::ToUnixMillis(at);
}

std::string FormatAge(int64_t ms) {
  if (ms < 0) ms = 0;
  int64_t s = ms / 1000;
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

std::string FormatTime(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

void PrintJson(const boost::json::value& v) { std::cout << boost::json::serialize(v) << "\n"; }

Progress::Progress(const Context& ctx, std::string what, int64_t total)
    : on_(ctx.progress), what_(std::move(what)), total_(total), start_(std::chrono::steady_clock::now()) {}

void Progress::Update(int64_t done) {
  done_ = done;
  if (!on_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(250)) return;
  last_ = now;
  double secs = std::chrono::duration<double>(now - start_).count();
  double rate = secs > 0 ? done / secs : 0;
  std::string eta = rate > 0 && total_ > done ? FormatAge(static_cast<int64_t>((total_ - done) / rate * 1000)) : "-";
  int width = 30;
  int filled = total_ > 0 ? static_cast<int>(width * std::min<int64_t>(done, total_) / total_) : width;
  std::fprintf(stderr, "\r%s [%s%s] %lld/%lld  %.0f/s  ETA %s   ", what_.c_str(), std::string(filled, '#').c_str(),
               std::string(width - filled, '.').c_str(), static_cast<long long>(done),
               static_cast<long long>(total_), rate, eta.c_str());
}

void Progress::Finish() {
  if (!on_) return;
  last_ = {};
  Update(done_);
  std::fprintf(stderr, "\n");
}

const std::map<std::string, std::string>& ReplaySafeTopics() {
  static const auto* topics = [] {
    auto* out = new std::map<std::string, std::string>;
    std::istringstream in(kReplaySafeText);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      auto sp = line.find_first_of(" \t");
      std::string name = line.substr(0, sp);
      std::string why = sp == std::string::npos ? "" : line.substr(line.find_first_not_of(" \t", sp));
      (*out)[name] = why;
    }
    return out;
  }();
  return *topics;
}

boost::json::value DecodeValue(const std::string* schema, const std::string& value) {
  // The generated pool holds a message type only when its file is linked
  // in: name one message of every relay.v1 file so that they are.
  static const google::protobuf::Descriptor* linked[] = {
      v1::WebhookRecord::descriptor(), v1::GitHubRequest::descriptor(), v1::DispatchRecord::descriptor(),
      v1::CallbackRequest::descriptor(), v1::ClusterEvent::descriptor()};
  (void)linked;
  boost::json::object out;
  out["bytes"] = value.size();
  if (!schema) {
    out["note"] = "no relay-schema header: not a relay message";
    return out;
  }
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  const google::protobuf::Descriptor* d = pool->FindMessageTypeByName(*schema);
  if (!d) {
    out["note"] = "unknown schema " + *schema;
    return out;
  }
  google::protobuf::DynamicMessageFactory factory(pool);
  std::unique_ptr<google::protobuf::Message> m(factory.GetPrototype(d)->New());
  if (!m->ParseFromString(value)) {
    out["note"] = "the bytes do not parse as " + *schema;
    return out;
  }
  std::string body;
  if (d == v1::WebhookRecord::descriptor()) {
    // The raw webhook body is JSON text: show it as such, not as base64.
    const auto* field = d->FindFieldByName("body");
    body = m->GetReflection()->GetString(*m, field);
    m->GetReflection()->ClearField(m.get(), field);
  }
  std::string text;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(*m, &text, o);
  boost::system::error_code ec;
  boost::json::value decoded = boost::json::parse(text, ec);
  if (!body.empty() && decoded.is_object()) {
    boost::json::value parsed = boost::json::parse(body, ec);
    decoded.as_object()["body"] = ec ? boost::json::value(body) : parsed;
  }
  out["schema"] = *schema;
  out["message"] = decoded;
  return out;
}

}  // namespace relay::relayctl
