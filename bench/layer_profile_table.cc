#include "bench/layer_profile_table.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gradsync {
namespace {

// Rows by `key` (an op's label or category): calls a step and the median of
// the per-step sums, largest first (ties by name, so the order is stable).
template <typename Key>
std::vector<ProfileRow> Group(const std::vector<std::vector<ProfiledOp>>& steps,
                              double total_ms, Key key) {
  std::map<std::string, int> calls;
  for (const ProfiledOp& op : steps.front()) ++calls[key(op)];
  std::map<std::string, std::vector<double>> sums, host_sums;
  for (const std::vector<ProfiledOp>& step : steps) {
    std::map<std::string, double> sum, host_sum;
    for (const ProfiledOp& op : step) {
      sum[key(op)] += op.ms;
      host_sum[key(op)] += op.host_ms;
    }
    for (const auto& [name, ms] : sum) sums[name].push_back(ms);
    for (const auto& [name, ms] : host_sum) host_sums[name].push_back(ms);
  }
  std::vector<ProfileRow> rows;
  for (const auto& [name, values] : sums) {
    ProfileRow row;
    row.name = name;
    row.calls = calls[name];
    row.ms = MedianOf(values);
    row.share = total_ms > 0 ? row.ms / total_ms : 0.0;
    row.host_ms = MedianOf(host_sums[name]);
    rows.push_back(row);
  }
  std::sort(rows.begin(), rows.end(),
            [](const ProfileRow& a, const ProfileRow& b) {
              return a.ms != b.ms ? a.ms > b.ms : a.name < b.name;
            });
  return rows;
}

void AppendRows(std::string& out, const std::vector<ProfileRow>& rows,
                size_t limit, const char* heading) {
  absl::StrAppend(&out,
                  absl::StrFormat("%-58s %6s %8s %10s %7s\n", heading, "calls",
                                  "host ms", "ms/step", "share"));
  for (size_t i = 0; i < rows.size() && i < limit; ++i) {
    const ProfileRow& row = rows[i];
    absl::StrAppend(&out, absl::StrFormat("%-58s %6d %8.3f %10.3f %6.1f%%\n",
                                          row.name, row.calls, row.host_ms,
                                          row.ms, 100.0 * row.share));
  }
  if (rows.size() > limit) {
    absl::StrAppend(&out, "  ... ", rows.size() - limit,
                    " more (all of them in --out)\n");
  }
}

nlohmann::json RowsJson(const std::vector<ProfileRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const ProfileRow& row : rows) {
    out.push_back({{"name", row.name},
                   {"calls", row.calls},
                   {"ms", row.ms},
                   {"share", row.share},
                   {"host_ms", row.host_ms}});
  }
  return out;
}

}  // namespace

double MedianOf(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

absl::StatusOr<ProfileTable> SummarizeProfile(
    const std::vector<std::vector<ProfiledOp>>& steps) {
  if (steps.empty()) {
    return absl::InvalidArgumentError("a profile needs at least one step");
  }
  const std::vector<ProfiledOp>& first = steps.front();
  for (size_t s = 1; s < steps.size(); ++s) {
    if (steps[s].size() != first.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "profiled step ", s, " queued ", steps[s].size(),
          " operations where step 0 queued ", first.size(),
          "; a profile compares steps that run the same operations"));
    }
    for (size_t i = 0; i < first.size(); ++i) {
      if (steps[s][i].label != first[i].label) {
        return absl::InvalidArgumentError(absl::StrCat(
            "profiled step ", s, " operation ", i, " is \"", steps[s][i].label,
            "\" where step 0's is \"", first[i].label,
            "\"; a profile compares steps that run the same operations"));
      }
    }
  }
  ProfileTable table;
  table.steps = static_cast<int>(steps.size());
  std::vector<double> totals, host_totals;
  for (const std::vector<ProfiledOp>& step : steps) {
    double total = 0, host_total = 0;
    for (const ProfiledOp& op : step) {
      total += op.ms;
      host_total += op.host_ms;
    }
    totals.push_back(total);
    host_totals.push_back(host_total);
  }
  table.total_ms = MedianOf(totals);
  table.host_total_ms = MedianOf(host_totals);
  for (size_t i = 0; i < first.size(); ++i) {
    std::vector<double> values, host_values;
    for (const std::vector<ProfiledOp>& step : steps) {
      values.push_back(step[i].ms);
      host_values.push_back(step[i].host_ms);
    }
    ProfiledOp op = first[i];
    op.ms = MedianOf(values);
    op.host_ms = MedianOf(host_values);
    table.ops.push_back(op);
  }
  table.labels = Group(steps, table.total_ms,
                       [](const ProfiledOp& op) { return op.label; });
  table.categories = Group(steps, table.total_ms,
                           [](const ProfiledOp& op) { return op.category; });
  return table;
}

std::string FormatProfile(const ProfileTable& table, int top) {
  std::string out = absl::StrFormat(
      "%d operations a step, %.3f ms of device time (median of %d steps)\n"
      "the host's time to queue them: %.3f ms a step (host ms: from the "
      "previous operation's mark to this one's)\n\n",
      static_cast<int>(table.ops.size()), table.total_ms, table.steps,
      table.host_total_ms);
  AppendRows(out, table.categories, table.categories.size(), "category");
  out += "\n";
  AppendRows(out, table.labels, static_cast<size_t>(std::max(top, 0)),
             "operation (kind and shape)");
  return out;
}

nlohmann::json ProfileJson(const ProfileTable& table) {
  nlohmann::json ops = nlohmann::json::array();
  for (const ProfiledOp& op : table.ops) {
    ops.push_back({{"label", op.label},
                   {"category", op.category},
                   {"ms", op.ms},
                   {"host_ms", op.host_ms}});
  }
  return {{"steps", table.steps},
          {"total_ms", table.total_ms},
          {"host_total_ms", table.host_total_ms},
          {"categories", RowsJson(table.categories)},
          {"labels", RowsJson(table.labels)},
          {"ops", ops}};
}

}  // namespace gradsync
