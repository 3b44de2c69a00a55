#include "relay/github/check_runs.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "relay/base/digest.h"
#include "relay/github/webhook_signature.h"

namespace relay::github {

std::string RequestId(std::initializer_list<std::string_view> parts) {
  std::string joined;
  for (auto p : parts) {
    joined.append(p.data(), p.size());
    joined.push_back('\n');
  }
  return Sha256Hex(joined);
}

std::string CheckRunName(std::string_view downstream_repo, std::string_view workflow, std::string_view job) {
  return "crcr/" + std::string(downstream_repo) + "/" + std::string(workflow) + "/" + std::string(job);
}

std::string CheckRunExternalId(std::string_view run_id, std::string_view attempt, std::string_view job) {
  return std::string(run_id) + "/" + std::string(attempt) + "/" + std::string(job);
}

std::optional<CheckRunRef> ParseCheckRun(std::string_view name, std::string_view external_id) {
  if (name.substr(0, 5) != "crcr/") return std::nullopt;
  std::vector<absl::string_view> parts = absl::StrSplit(absl::string_view(name.data() + 5, name.size() - 5), '/');
  std::vector<absl::string_view> ext = absl::StrSplit(absl::string_view(external_id.data(), external_id.size()), '/');
  if (parts.size() < 4 || parts[0].empty() || parts[1].empty() || ext.size() < 3) return std::nullopt;
  CheckRunRef ref;
  ref.downstream_repo = std::string(parts[0]) + "/" + std::string(parts[1]);
  if (!absl::SimpleAtoi(ext[0], &ref.run_id) || ref.run_id <= 0) return std::nullopt;
  return ref;
}

}  // namespace relay::github
