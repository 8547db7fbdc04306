// The job's link as LinkFigures (see emulated_link.h).
#include "tools/emulated_link.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/launch/netem.h"

namespace gradsync {

LinkFigures LinkFiguresFromNetemSpec(const std::string& spec) {
  LinkFigures link;
  absl::StatusOr<LinkSpec> parsed = ParseLinkSpec(spec);
  if (!parsed.ok()) {
    link.description = absl::StrCat("--netem=", spec, " not understood");
    return link;
  }
  link.rate_bytes_per_s = parsed->rate_bits_per_s / 8.0;
  link.round_trip_s = 2 * absl::ToDoubleSeconds(parsed->latency);
  link.description = absl::StrCat(spec, " (gradsync launch --netem)");
  return link;
}

LinkFigures LinkFiguresOfThisProcess() {
  const char* netem = std::getenv("GRADSYNC_NETEM");
  if (netem == nullptr || *netem == '\0') {
    const char* job_link = std::getenv(kJobLinkEnv);
    if (job_link == nullptr || *job_link == '\0') return LinkFigures{};
    LinkFigures link = LinkFiguresFromNetemSpec(job_link);
    link.description =
        link.rate_bytes_per_s > 0
            ? absl::StrCat(job_link, " (", kJobLinkEnv,
                           ": the job's link as the job script gives it)")
            : absl::StrCat(kJobLinkEnv, "=", job_link, " not understood");
    return link;
  }
  LinkFigures link = LinkFiguresFromNetemSpec(netem);
  const char* latency = std::getenv("GRADSYNC_NETEM_LATENCY_EMULATED");
  if (latency != nullptr && std::string(latency) == "0" &&
      link.round_trip_s > 0) {
    link.round_trip_s = 0;
    link.description += ", latency not emulated (no sch_netem)";
  }
  return link;
}

}  // namespace gradsync
