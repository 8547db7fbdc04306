// Early-return helpers for absl::Status / absl::StatusOr: every fallible call
// is checked, and the error travels up with the context each layer adds.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define GS_CONCAT_INNER(a, b) a##b
#define GS_CONCAT(a, b) GS_CONCAT_INNER(a, b)

// RETURN_IF_ERROR(expr): returns the status of `expr` if it is not OK.
#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status gs_status_ = (expr);      \
    if (!gs_status_.ok()) return gs_status_; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): unwraps a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  GS_ASSIGN_OR_RETURN_IMPL(GS_CONCAT(gs_statusor_, __LINE__), lhs, expr)
#define GS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

namespace gradsync {

// Prefixes `status`'s message with `context` ("reading /x/y: ...").
inline absl::Status Annotate(const absl::Status& status,
                             absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

}  // namespace gradsync
