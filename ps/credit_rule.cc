// --credit_kb's auto for the PS under --schedule=priority (see credit_rule.h).
#include "ps/credit_rule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gradsync {

CreditChoice ChooseCredit(int64_t key_bytes, int64_t window_bytes,
                          const std::string& direction) {
  CreditChoice choice;
  const int64_t keys = kCreditKeys * key_bytes;
  const int64_t windowed = key_bytes + window_bytes;
  choice.credit_bytes = std::max(keys, windowed);
  choice.reason =
      keys >= windowed
          ? absl::StrCat("auto: ", kCreditKeys, " keys of ", key_bytes / 1024,
                         " KiB (>= one key + the ", direction,
                         " stream window, ", window_bytes / 1024,
                         " KiB): one written while the others' "
                         "acknowledgements are on their way")
          : absl::StrCat("auto: one key (", key_bytes / 1024, " KiB) + the ",
                         direction, " stream window (", window_bytes / 1024,
                         " KiB, > ", kCreditKeys - 1,
                         " keys), the bytes that leave in the link's round "
                         "trip");
  return choice;
}

}  // namespace gradsync
