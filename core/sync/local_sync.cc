// --sync=local: a single worker has nothing to synchronize. It is the reference
// every other strategy is compared with (same model, same data order, N x
// batch).
#include "absl/strings/str_cat.h"
#include "core/sync/gradient_sync.h"

namespace gradsync {
namespace {

class LocalSync : public GradientSync {
 public:
  absl::Status Setup(const ParamLayout&, Device&, const SyncBuffers&) override {
    return absl::OkStatus();
  }
  void BucketReady(int) override {}
  absl::Status Finish(StepStats&) override { return absl::OkStatus(); }
  // Nothing depends on the buckets.
  absl::Status Rebucket(const ParamLayout&) override {
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<GradientSync>> CreateLocalSync(
    const SyncContext& context) {
  if (context.identity.world_size != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sync=local runs one worker, but the job has ",
                     context.identity.world_size,
                     "; choose --sync=ps or --sync=ring for several workers"));
  }
  return std::unique_ptr<GradientSync>(new LocalSync);
}

}  // namespace

GRADSYNC_REGISTER_SYNC(local, CreateLocalSync);

}  // namespace gradsync
