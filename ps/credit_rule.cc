// --credit_kb's auto for the PS under --schedule=priority (see credit_rule.h).
#include "ps/credit_rule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gradsync {

CreditChoice ChooseCredit(int64_t key_bytes, int64_t window_bytes,
                          CreditDirection direction) {
  CreditChoice choice;
  if (direction == CreditDirection::kPush) {
    choice.credit_bytes = std::max(key_bytes, window_bytes);
    choice.reason = absl::StrCat(
        "auto: the push stream window (", window_bytes / 1024,
        " KiB, twice the round trip's bytes), at least one key (",
        key_bytes / 1024,
        " KiB): no more, as a late key shares the worker's uplink with "
        "every server's keys in flight");
    return choice;
  }
  const int64_t keys = kCreditKeys * key_bytes;
  const int64_t windowed = key_bytes + window_bytes;
  choice.credit_bytes = std::max(keys, windowed);
  choice.reason =
      keys >= windowed
          ? absl::StrCat("auto: ", kCreditKeys, " keys of ", key_bytes / 1024,
                         " KiB (>= one key + the pull stream window, ",
                         window_bytes / 1024,
                         " KiB): pulls wait for every worker's push, so "
                         "several are in flight while one moves bytes")
          : absl::StrCat("auto: one key (", key_bytes / 1024,
                         " KiB) + the pull stream window (", window_bytes / 1024,
                         " KiB), the bytes that leave in the link's round "
                         "trip");
  return choice;
}

}  // namespace gradsync
