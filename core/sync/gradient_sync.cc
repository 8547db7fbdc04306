#include "core/sync/gradient_sync.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/base/logging.h"

namespace gradsync {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, GradientSyncFactory> factories ABSL_GUARDED_BY(mu);
  std::map<std::string, GradientSyncCheck> checks ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

}  // namespace

bool GradientSyncRegistry::Register(const std::string& name,
                                    GradientSyncFactory factory) {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  GS_CHECK(registry.factories.emplace(name, std::move(factory)).second)
      << "gradient sync strategy '" << name << "' registered twice";
  return true;
}

absl::StatusOr<std::unique_ptr<GradientSync>> GradientSyncRegistry::Create(
    const std::string& name, const SyncContext& context) {
  GradientSyncFactory factory;
  {
    Registry& registry = GetRegistry();
    absl::MutexLock lock(&registry.mu);
    auto it = registry.factories.find(name);
    if (it != registry.factories.end()) factory = it->second;
  }
  if (!factory) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown --sync=", name,
        "; this build has: ", absl::StrJoin(Names(), ", "),
        (name == "nccl" ? " (nccl needs a build with --config=cuda)" : "")));
  }
  return factory(context);
}

bool GradientSyncRegistry::RegisterCheck(const std::string& name,
                                         GradientSyncCheck check) {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  GS_CHECK(registry.checks.emplace(name, std::move(check)).second)
      << "gradient sync strategy '" << name << "' has two checks";
  return true;
}

absl::Status GradientSyncRegistry::CheckOptions(const std::string& name,
                                                const SyncContext& context) {
  GradientSyncCheck check;
  bool known = false;
  {
    Registry& registry = GetRegistry();
    absl::MutexLock lock(&registry.mu);
    known = registry.factories.count(name) > 0;
    auto it = registry.checks.find(name);
    if (it != registry.checks.end()) check = it->second;
  }
  if (!known) return Create(name, context).status();  // its error
  return check ? check(context) : absl::OkStatus();
}

std::vector<std::string> GradientSyncRegistry::Names() {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  std::vector<std::string> names;
  for (const auto& entry : registry.factories) names.push_back(entry.first);
  return names;
}

}  // namespace gradsync
