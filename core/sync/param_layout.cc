// Flat-buffer offsets and reverse-order communication buckets for a model's
// parameters.
#include "core/sync/param_layout.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gradsync {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, "x"), "]");
}

// "40 B", "10.0 KiB", "2.1 MiB".
std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  if (bytes < 1024 * 1024) {
    return absl::StrFormat("%.1f KiB", static_cast<double>(bytes) / 1024.0);
  }
  return absl::StrFormat("%.1f MiB",
                         static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace

int64_t ParamSpec::numel() const {
  // An empty shape is a scalar: one element, as in PyTorch.
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

absl::StatusOr<ParamLayout> ParamLayout::Create(std::vector<ParamSpec> specs,
                                                int64_t bucket_bytes) {
  if (specs.empty()) {
    return absl::InvalidArgumentError(
        "parameter layout: the model has no parameters");
  }
  ParamLayout layout;
  absl::flat_hash_set<std::string> names;
  int64_t offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    ParamSpec& spec = specs[i];
    if (spec.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter layout: parameter ", i, " (shape ",
                       ShapeString(spec.shape), ") has an empty name"));
    }
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter layout: duplicate parameter name '",
                       spec.name, "' (parameter ", i, ")"));
    }
    // Offsets are counted in floats and sent as byte counts; keep the total
    // well inside int64 so no product below can overflow.
    constexpr int64_t kMaxNumel = int64_t{1} << 40;
    int64_t numel = 1;
    for (int64_t dim : spec.shape) {
      // Zero-sized tensors would make empty buckets and zero-length messages
      // that every strategy would have to special-case; no model needs one.
      if (dim < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter layout: parameter '", spec.name, "' has shape ",
            ShapeString(spec.shape), "; every dimension must be >= 1"));
      }
      if (numel > kMaxNumel / dim || offset + numel * dim > kMaxNumel) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter layout: parameter '", spec.name,
                         "' with shape ", ShapeString(spec.shape),
                         " makes the model larger than 2^40 floats"));
      }
      numel *= dim;
    }
    if (spec.sparse_row_width < 0 ||
        (spec.sparse_row_width > 0 && numel % spec.sparse_row_width != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter layout: parameter '", spec.name, "' with shape ",
          ShapeString(spec.shape), " cannot be row-sparse with rows of ",
          spec.sparse_row_width, " floats"));
    }
    ParamInfo info;
    info.numel = numel;
    info.offset = offset;
    info.spec = std::move(spec);
    offset += info.numel;
    layout.params_.push_back(std::move(info));
  }
  layout.total_numel_ = offset;

  // Walk backwards (the order gradients become final) and close a bucket when
  // the next parameter would push it over the cap. A parameter larger than the
  // cap therefore lands alone in a bucket, and the cap is never exceeded
  // otherwise. Because parameters are visited in reverse of their storage
  // order, each bucket is the contiguous span ending where the previous one
  // began.
  Bucket current;
  auto close_bucket = [&layout, &current]() {
    current.index = static_cast<int>(layout.buckets_.size());
    current.offset = layout.params_[current.params.back()].offset;
    for (int p : current.params) layout.params_[p].bucket = current.index;
    layout.buckets_.push_back(std::move(current));
    current = Bucket();
  };
  for (int p = static_cast<int>(layout.params_.size()) - 1; p >= 0; --p) {
    const int64_t numel = layout.params_[p].numel;
    const int64_t row_width = layout.params_[p].spec.sparse_row_width;
    // A row-sparse tensor closes the bucket before it and is closed alone.
    if (!current.params.empty() &&
        (row_width > 0 ||
         (bucket_bytes > 0 && (current.numel + numel) * 4 > bucket_bytes))) {
      close_bucket();
    }
    current.params.push_back(p);
    current.numel += numel;
    current.sparse_row_width = row_width;
    if (row_width > 0 && p > 0) close_bucket();
  }
  close_bucket();
  return layout;
}

absl::StatusOr<ParamLayout> ParamLayout::Slice(int first_param,
                                               int end_param) const {
  const int count = static_cast<int>(params_.size());
  if (first_param < 0 || end_param > count || first_param >= end_param) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter layout: cannot slice parameters [", first_param,
                     ", ", end_param, ") out of ", count));
  }
  ParamLayout slice;
  const int64_t base = params_[first_param].offset;
  for (int p = first_param; p < end_param; ++p) {
    ParamInfo info = params_[p];
    info.offset -= base;
    info.bucket = -1;
    slice.params_.push_back(std::move(info));
  }
  slice.total_numel_ =
      params_[end_param - 1].offset + params_[end_param - 1].numel - base;
  for (const Bucket& bucket : buckets_) {
    int inside = 0;
    for (int p : bucket.params) inside += p >= first_param && p < end_param;
    if (inside == 0) continue;
    if (inside != static_cast<int>(bucket.params.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter layout: bucket ", bucket.index,
                       " holds parameters on both sides of the slice [",
                       first_param, ", ", end_param, ")"));
    }
    Bucket sliced = bucket;
    sliced.index = static_cast<int>(slice.buckets_.size());
    sliced.offset -= base;
    for (int& p : sliced.params) {
      p -= first_param;
      slice.params_[p].bucket = sliced.index;
    }
    slice.buckets_.push_back(std::move(sliced));
  }
  return slice;
}

std::string ParamLayout::Describe() const {
  std::vector<std::string> lines;
  lines.reserve(buckets_.size());
  for (const Bucket& bucket : buckets_) {
    std::vector<std::string> names;
    names.reserve(bucket.params.size());
    for (int p : bucket.params) names.push_back(params_[p].spec.name);
    lines.push_back(absl::StrCat(
        "bucket ", bucket.index, ": ", bucket.params.size(),
        bucket.params.size() == 1 ? " param, " : " params, ",
        FormatBytes(bucket.numel * 4),
        bucket.sparse_row_width > 0
            ? absl::StrCat(", row-sparse (rows of ", bucket.sparse_row_width,
                           ")")
            : "",
        " [", absl::StrJoin(names, " "), "]"));
  }
  return absl::StrJoin(lines, "\n");
}

}  // namespace gradsync
