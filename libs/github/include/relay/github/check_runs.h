// The names relay gives the things it writes to GitHub, shared by the
// service that asks for a write (collector) and the one that makes it and
// reads them back (dispatch).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace relay::github {

// Deterministic request id: hex SHA-256 of the parts, '\n'-joined. The same
// logical write always gets the same id, so a replay is recognised.
std::string RequestId(std::initializer_list<std::string_view> parts);

// A relay check run upstream: "crcr/<owner>/<repo>/<workflow>/<job>", with
// external id "<run_id>/<attempt>/<job>" (one check run per attempt).
std::string CheckRunName(std::string_view downstream_repo, std::string_view workflow, std::string_view job);
std::string CheckRunExternalId(std::string_view run_id, std::string_view attempt, std::string_view job);
struct CheckRunRef {
  std::string downstream_repo;
  int64_t run_id = 0;
};
std::optional<CheckRunRef> ParseCheckRun(std::string_view name, std::string_view external_id);

}  // namespace relay::github
