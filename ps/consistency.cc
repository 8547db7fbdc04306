// The PS's update and consistency rules (see consistency.h).
#include "ps/consistency.h"

#include "absl/strings/str_cat.h"

namespace gradsync {

absl::StatusOr<ps::UpdateMode> ParseUpdateMode(const std::string& name) {
  if (name == "worker") return ps::UPDATE_WORKER;
  if (name == "server") return ps::UPDATE_SERVER;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --ps_update=", name, "; choose worker or server"));
}

const char* UpdateModeName(ps::UpdateMode mode) {
  return mode == ps::UPDATE_SERVER ? "server" : "worker";
}

absl::StatusOr<ps::Consistency> ParseConsistency(const std::string& name) {
  if (name == "bsp") return ps::CONSISTENCY_BSP;
  if (name == "ssp") return ps::CONSISTENCY_SSP;
  if (name == "asp") return ps::CONSISTENCY_ASP;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --ps_consistency=", name, "; choose bsp, ssp or asp"));
}

const char* ConsistencyName(ps::Consistency mode) {
  switch (mode) {
    case ps::CONSISTENCY_SSP:
      return "ssp";
    case ps::CONSISTENCY_ASP:
      return "asp";
    default:
      return "bsp";
  }
}

std::string ConsistencyNote(ps::Consistency mode, int64_t staleness) {
  switch (mode) {
    case ps::CONSISTENCY_SSP:
      return absl::StrCat(" (SSP, staleness ", staleness, ")");
    case ps::CONSISTENCY_ASP:
      return " (ASP)";
    default:
      return "";
  }
}

absl::Status CheckConsistency(ps::Consistency mode, int32_t staleness,
                              ps::UpdateMode update_mode) {
  if (!ps::Consistency_IsValid(mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown consistency mode ", static_cast<int>(mode)));
  }
  const char* name = ConsistencyName(mode);
  if (mode == ps::CONSISTENCY_SSP &&
      (staleness < 0 || staleness > kMaxStaleness)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps_consistency=ssp needs --ps_staleness in [0, ", kMaxStaleness,
        "] (how many steps a worker may run ahead of the slowest); got ",
        staleness));
  }
  if (mode != ps::CONSISTENCY_SSP && staleness != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ps_staleness=", staleness,
                     " is only for --ps_consistency=ssp, not ", name));
  }
  if (mode != ps::CONSISTENCY_BSP && update_mode != ps::UPDATE_SERVER) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps_consistency=", name,
        " needs --ps_update=server: the servers apply each worker's gradient "
        "as it arrives, which needs the parameters and the optimizer there"));
  }
  return absl::OkStatus();
}

}  // namespace gradsync
