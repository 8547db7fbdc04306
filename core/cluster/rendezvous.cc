#include "core/cluster/rendezvous.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace gradsync {

const char* RoleName(Role role) {
  return role == Role::kServer ? "server" : "worker";
}

absl::StatusOr<std::string> Rendezvous::Broadcast(const std::string& key,
                                                  int rank, int root,
                                                  const std::string& value,
                                                  absl::Duration timeout) {
  if (rank == root) {
    RETURN_IF_ERROR(Set(key, value));
    return value;
  }
  return Get(key, timeout);
}

namespace {

// Every rank's value under "<prefix>/<r>", this rank's without asking.
absl::StatusOr<std::vector<std::string>> GetAll(Rendezvous& rendezvous,
                                                const std::string& prefix,
                                                int rank, int count,
                                                const std::string& value,
                                                absl::Duration timeout) {
  std::vector<std::string> values;
  values.reserve(count);
  for (int r = 0; r < count; ++r) {
    if (r == rank) {
      values.push_back(value);
      continue;
    }
    ASSIGN_OR_RETURN(std::string theirs,
                     rendezvous.Get(absl::StrCat(prefix, "/", r), timeout));
    values.push_back(std::move(theirs));
  }
  return values;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> Rendezvous::Gather(
    const std::string& prefix, int rank, int count, int root,
    const std::string& value, absl::Duration timeout) {
  RETURN_IF_ERROR(Set(absl::StrCat(prefix, "/", rank), value));
  if (rank != root) return std::vector<std::string>();
  return GetAll(*this, prefix, rank, count, value, timeout);
}

absl::StatusOr<std::vector<std::string>> Rendezvous::AllGather(
    const std::string& prefix, int rank, int count, const std::string& value,
    absl::Duration timeout) {
  RETURN_IF_ERROR(Set(absl::StrCat(prefix, "/", rank), value));
  return GetAll(*this, prefix, rank, count, value, timeout);
}

}  // namespace gradsync
