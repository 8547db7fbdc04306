// The parameter server's settings for one job (see settings.h).
#include "ps/settings.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ps/setting_checks.h"

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

PsStreamSettings ResolveStreamSettings(int64_t stream_window_bytes,
                                       int64_t message_bytes,
                                       const LinkFigures& link,
                                       int num_workers, int num_servers) {
  PsStreamSettings streams;
  streams.push_window =
      ResolveStreamWindow(stream_window_bytes, link, num_workers);
  streams.pull_window =
      ResolveStreamWindow(stream_window_bytes, link, num_servers);
  streams.push_message = ResolveMessageSize(message_bytes, streams.push_window);
  streams.pull_message = ResolveMessageSize(message_bytes, streams.pull_window);
  return streams;
}

absl::StatusOr<PsSettings> ResolvePsSettings(const PsSettingsInputs& inputs,
                                             const ParamLayout& layout,
                                             Partition* partition) {
  PsSettings settings;
  settings.update_mode = inputs.update_mode;
  settings.consistency = inputs.consistency;
  settings.partition = inputs.partition;
  settings.compression = inputs.compression;
  settings.optimizer = inputs.optimizer;
  const int n = inputs.num_workers;
  // Every worker computes the same shares from the same job shape; the
  // servers check at registration that the policy is the same everywhere.
  absl::StatusOr<std::vector<double>> shares =
      ServerShares(inputs.partition, n, inputs.colocated_servers,
                   inputs.num_servers - inputs.colocated_servers);
  if (!shares.ok()) return shares.status();
  settings.shares = *std::move(shares);
  // The rule's size even where a flag wins: the imbalance warning names it.
  absl::StatusOr<KeySizeChoice> key_rule =
      ChooseKeySize(layout, settings.shares, n);
  if (!key_rule.ok()) return key_rule.status();
  settings.schedule = inputs.schedule.kind;
  const bool priority = inputs.schedule.kind == ScheduleKind::kPriority;
  const int64_t partition_bytes =
      priority ? inputs.schedule.partition_bytes : 0;
  if (partition_bytes > 0 && inputs.chunk_bytes > 0 &&
      partition_bytes != inputs.chunk_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sync=ps --schedule=priority: --partition_kb=",
        partition_bytes / 1024, " and --ps_chunk_kb=",
        inputs.chunk_bytes / 1024,
        " disagree; on the PS a partition is a key: give one of them"));
  }
  absl::StatusOr<ResolvedSetting> key_size = ResolveKeySize(
      partition_bytes > 0 ? partition_bytes : inputs.chunk_bytes, layout,
      settings.shares, n);
  if (!key_size.ok()) return key_size.status();
  settings.key_size = *std::move(key_size);
  if (partition_bytes > 0) settings.key_size.source = "flag: --partition_kb";
  settings.streams =
      ResolveStreamSettings(inputs.stream_window_bytes, inputs.message_bytes,
                            inputs.link, n, inputs.num_servers);
  if (priority) {
    auto credit = [&](const ResolvedStreamWindow& window,
                      CreditDirection direction) -> ResolvedSetting {
      if (inputs.schedule.credit_bytes > 0) {
        return {inputs.schedule.credit_bytes, "flag"};
      }
      CreditChoice choice =
          ChooseCredit(settings.key_size.bytes, window.bytes, direction);
      return {choice.credit_bytes, choice.reason};
    };
    if (inputs.schedule.credit_bytes > 0 &&
        inputs.schedule.credit_bytes < settings.key_size.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sync=ps --schedule=priority: --credit_kb=",
          inputs.schedule.credit_bytes / 1024, " is smaller than a key (",
          settings.key_size.bytes / 1024, " KiB, ", settings.key_size.source,
          "); a credit must hold at least one key: raise --credit_kb or "
          "leave it 0 (derived)"));
    }
    settings.push_credit =
        credit(settings.streams.push_window, CreditDirection::kPush);
    settings.pull_credit =
        credit(settings.streams.pull_window, CreditDirection::kPull);
  }
  absl::StatusOr<PsPull> pull =
      ResolvePsPull(inputs.pull, inputs.compression, inputs.update_mode);
  if (!pull.ok()) return pull.status();
  settings.pull = *pull;

  absl::StatusOr<Partition> placed =
      Partition::Create(layout, settings.shares, settings.key_size.bytes);
  if (!placed.ok()) return placed.status();
  *partition = *std::move(placed);
  settings.placement = partition->Describe();

  if (std::optional<std::string> warning =
          ImbalanceWarning(*partition, *key_rule)) {
    settings.warnings.push_back(*std::move(warning));
  }
  if (std::optional<std::string> warning = AsyncMomentumWarning(
          inputs.consistency.mode, inputs.optimizer)) {
    settings.warnings.push_back(*std::move(warning));
  }
  const double largest_share =
      *std::max_element(partition->shares().begin(), partition->shares().end());
  if (std::optional<std::string> warning = TimeoutWarning(
          inputs.timeout,
          PredictedPsStepSeconds(layout.total_bytes(), n, largest_share,
                                 settings.key_size.bytes, inputs.link),
          absl::StrCat("this PS job (K=", partition->num_servers(), ")"))) {
    settings.warnings.push_back(*std::move(warning));
  }
  return settings;
}

std::vector<std::string> PsSettings::LogLines() const {
  auto kib = [](int64_t bytes) { return bytes / 1024; };
  std::vector<std::string> lines = {
      absl::StrCat("ps: key size ", kib(key_size.bytes), " KiB (",
                   key_size.source, ")"),
      absl::StrCat("ps: push stream window ", kib(streams.push_window.bytes),
                   " KiB (", streams.push_window.source, ")"),
      absl::StrCat("ps: pull stream window ", kib(streams.pull_window.bytes),
                   " KiB (", streams.pull_window.source, ")"),
      absl::StrCat("ps: push messages of at most ",
                   kib(streams.push_message.bytes), " KiB (",
                   streams.push_message.source, ")"),
      absl::StrCat("ps: result messages of at most ",
                   kib(streams.pull_message.bytes), " KiB (",
                   streams.pull_message.source, ")"),
      absl::StrCat("ps: ", placement),
  };
  if (schedule == ScheduleKind::kPriority) {
    lines.push_back(absl::StrCat(
        "ps: --schedule=priority: keys lowest offset first; push credit ",
        kib(push_credit.bytes), " KiB (", push_credit.source,
        "), pull credit ", kib(pull_credit.bytes), " KiB (",
        pull_credit.source, ")"));
  }
  if (compression.method != CompressionMethod::kNone) {
    lines.push_back(absl::StrCat("ps: --compression=", compression.ToString(),
                                 ", results pulled as ", PsPullName(pull)));
  }
  return lines;
}

std::vector<PsManifestEntry> PsSettings::ManifestEntries() const {
  auto kib = [](int64_t bytes) { return bytes / 1024.0; };
  std::vector<PsManifestEntry> entries = {
      {"ps_chunk_kb", kib(key_size.bytes), key_size.source},
      {"ps_stream_window_kb.push", kib(streams.push_window.bytes),
       streams.push_window.source},
      {"ps_stream_window_kb.pull", kib(streams.pull_window.bytes),
       streams.pull_window.source},
      {"ps_message_kb.push", kib(streams.push_message.bytes),
       streams.push_message.source},
      {"ps_message_kb.pull", kib(streams.pull_message.bytes),
       streams.pull_message.source},
  };
  if (schedule == ScheduleKind::kPriority) {
    entries.push_back(
        {"ps_credit_kb.push", kib(push_credit.bytes), push_credit.source});
    entries.push_back(
        {"ps_credit_kb.pull", kib(pull_credit.bytes), pull_credit.source});
  }
  return entries;
}

ps::OptimizerConfig PsSettings::OptimizerProto() const {
  ps::OptimizerConfig config;
  config.set_kind(optimizer.kind);
  config.set_lr(optimizer.lr);
  config.set_momentum(optimizer.momentum);
  config.set_weight_decay(optimizer.weight_decay);
  config.set_beta1(optimizer.beta1);
  config.set_beta2(optimizer.beta2);
  config.set_epsilon(optimizer.epsilon);
  return config;
}

}  // namespace gradsync
