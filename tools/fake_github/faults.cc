#include "faults.h"

namespace relay::fake_github {

absl::Status Faults::Add(const boost::json::object& o) {
  const auto* path = o.if_contains("path");
  const auto* status = o.if_contains("status");
  if (!path || !path->is_string() || !status || !status->is_number()) {
    return absl::InvalidArgumentError("a fault needs path (regex) and status");
  }
  Fault f;
  try {
    f.path = std::regex(std::string(path->as_string()));
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(std::string("bad path regex: ") + e.what());
  }
  f.answer.status = static_cast<unsigned>(status->to_number<int64_t>());
  if (auto* x = o.if_contains("method"); x && x->is_string()) f.method = std::string(x->as_string());
  if (auto* x = o.if_contains("count"); x && x->is_number()) f.count = static_cast<int>(x->to_number<int64_t>());
  if (auto* x = o.if_contains("retry_after"); x && x->is_number()) {
    f.answer.retry_after = static_cast<int>(x->to_number<int64_t>());
  }
  if (auto* x = o.if_contains("message"); x && x->is_string()) f.answer.message = std::string(x->as_string());
  faults_.push_back(std::move(f));
  return absl::OkStatus();
}

std::optional<Faults::Answer> Faults::Take(const std::string& method, const std::string& path) {
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if ((!it->method.empty() && it->method != method) || !std::regex_search(path, it->path)) continue;
    Answer answer = it->answer;
    if (it->count > 0 && --it->count == 0) faults_.erase(it);
    return answer;
  }
  return std::nullopt;
}

}  // namespace relay::fake_github
