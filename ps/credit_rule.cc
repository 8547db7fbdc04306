// --credit_kb's auto for the PS under --schedule=priority (see credit_rule.h).
#include "ps/credit_rule.h"

#include "absl/strings/str_cat.h"

namespace gradsync {

CreditChoice ChooseCredit(int64_t key_bytes, int64_t window_bytes,
                          const std::string& direction) {
  CreditChoice choice;
  choice.credit_bytes = key_bytes + window_bytes;
  choice.reason = absl::StrCat(
      "auto: one key (", key_bytes / 1024, " KiB) + the ", direction,
      " stream window (", window_bytes / 1024,
      " KiB), so the link stays busy for the round trip before a key's "
      "credit comes back");
  return choice;
}

}  // namespace gradsync
