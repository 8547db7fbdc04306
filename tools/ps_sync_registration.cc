// Registers --sync=ps: the strategy (ps/ps_sync.h) with its options from the
// --ps_* flags (ps_flags.h). Link with alwayslink so the registration runs.
#include "core/base/status_macros.h"
#include "core/sync/gradient_sync.h"
#include "ps/ps_sync.h"
#include "tools/ps_flags.h"

namespace gradsync {

GRADSYNC_REGISTER_SYNC(ps,
                       [](const SyncContext& context)
                           -> absl::StatusOr<std::unique_ptr<GradientSync>> {
                         ASSIGN_OR_RETURN(PsSyncOptions options,
                                          PsSyncOptionsFromFlags(context));
                         return CreatePsSync(context, options);
                       });

// The flags' values and combinations, for `gradsync launch` before it starts
// the workers (GradientSyncRegistry::CheckOptions).
[[maybe_unused]] const bool ps_check_registered =
    GradientSyncRegistry::RegisterCheck("ps", [](const SyncContext& context) {
      return PsSyncOptionsFromFlags(context).status();
    });

}  // namespace gradsync
