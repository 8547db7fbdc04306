// The parameter server's per-job settings (see tuning.h).
#include "ps/tuning.h"

#include "absl/strings/str_format.h"

namespace gradsync {

ResolvedStreamWindow ResolveStreamWindow(int64_t explicit_bytes,
                                         const LinkFigures& link, int fan_in) {
  if (explicit_bytes > 0) return {explicit_bytes, false, "flag"};
  StreamWindowChoice choice = ChooseStreamWindow(link, fan_in);
  return {choice.window_bytes, choice.bdp_probe, choice.reason};
}

ResolvedSetting ResolveMessageSize(int64_t explicit_bytes,
                                   const ResolvedStreamWindow& window) {
  if (explicit_bytes > 0) return {explicit_bytes, "flag"};
  MessageSizeChoice choice = ChooseMessageSize(window.bytes);
  return {choice.message_bytes, choice.reason};
}

absl::StatusOr<ResolvedSetting> ResolveKeySize(
    int64_t explicit_bytes, const ParamLayout& layout,
    const std::vector<double>& shares, int num_workers) {
  if (explicit_bytes > 0) return ResolvedSetting{explicit_bytes, "flag"};
  absl::StatusOr<KeySizeChoice> choice =
      ChooseKeySize(layout, shares, num_workers);
  if (!choice.ok()) return choice.status();
  return ResolvedSetting{choice->key_bytes, choice->reason};
}

std::optional<std::string> ImbalanceWarning(const Partition& partition,
                                            const KeySizeChoice& rule) {
  const std::vector<int64_t>& bytes = partition.server_bytes();
  const std::vector<double>& shares = partition.shares();
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  if (total == 0) return std::nullopt;
  int worst = -1;
  double worst_load = 0;
  for (size_t s = 0; s < bytes.size(); ++s) {
    if (shares[s] <= 0) continue;
    const double load = bytes[s] / (shares[s] * total);
    if (worst < 0 || load > worst_load) {
      worst = static_cast<int>(s);
      worst_load = load;
    }
  }
  if (worst < 0 || worst_load <= kImbalanceWarning) return std::nullopt;
  std::string fix =
      rule.key_bytes == partition.chunk_bytes()
          ? "no key size fixes it (a few tensors dominate the model); use "
            "fewer servers"
          : absl::StrFormat(
                "--ps_chunk_kb=%d (or leave --ps_chunk_kb unset: auto) puts "
                "every server within %.2fx of its share",
                rule.key_bytes / 1024, rule.imbalance);
  return absl::StrFormat(
      "ps: server %d holds %.2fx its share of the gradient (%.3f MiB of "
      "%.3f MiB over %d servers) with %d KiB keys, and every step waits for "
      "it; %s",
      worst, worst_load, bytes[worst] / (1024.0 * 1024.0),
      total / (1024.0 * 1024.0), partition.num_servers(),
      partition.chunk_bytes() / 1024, fix);
}

}  // namespace gradsync
