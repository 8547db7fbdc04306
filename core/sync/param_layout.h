// The parameter layout: the ordered list of named tensors a strategy sees,
// their place in one flat buffer, and their grouping into communication
// buckets.
//
// Parameters are stored in forward order (layer 0 first) in one contiguous
// buffer; gradients use the same offsets in a second buffer. Buckets group
// consecutive parameters in *reverse* order (the last layer's gradients are
// final first during backward), each capped at `bucket_bytes` like PyTorch
// DDP's bucket_cap_mb, so every bucket is one contiguous span of the flat
// buffer and a strategy can send it without copying.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gradsync {

struct ParamSpec {
  std::string name;            // "fc1.weight"
  std::vector<int64_t> shape;  // {out, in}
  // Non-zero for a tensor whose gradient is row-sparse by nature (an
  // embedding table: a step touches the rows of the ids it saw): the length
  // of one row, which must divide numel(). Such a tensor gets a bucket of its
  // own, so a strategy can send only the touched rows (SparseRowsOf).
  int64_t sparse_row_width = 0;
  int64_t numel() const;
};

struct ParamInfo {
  ParamSpec spec;
  int64_t offset = 0;  // in floats, within the flat buffer
  int64_t numel = 0;
  int bucket = -1;
};

struct Bucket {
  int index = 0;
  int64_t offset = 0;  // in floats
  int64_t numel = 0;
  std::vector<int> params;  // indices into ParamLayout::params(), in the order
                            // their gradients become final (reverse)
  // The row length of the bucket's one row-sparse tensor; 0: dense.
  int64_t sparse_row_width = 0;
};

class ParamLayout {
 public:
  // `specs` in forward order. A parameter larger than the cap gets a bucket of
  // its own, and so does a row-sparse one; bucket_bytes <= 0 puts everything
  // else in one bucket.
  static absl::StatusOr<ParamLayout> Create(std::vector<ParamSpec> specs,
                                            int64_t bucket_bytes);

  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  int64_t total_numel() const { return total_numel_; }
  int64_t total_bytes() const { return total_numel_ * 4; }

  // The parameters [first_param, end_param) as a layout of their own, for a
  // strategy that moves only part of the model (--sync=hybrid): offsets
  // counted from the first one's, and the buckets that lie wholly inside the
  // range, in the same order and renumbered from 0. An empty range, or a
  // bucket that holds parameters on both sides of an edge, is an error.
  absl::StatusOr<ParamLayout> Slice(int first_param, int end_param) const;

  // One line per bucket, for logs: "bucket 0: 2 params, 10.0 KiB [fc3.bias
  // fc3.weight]".
  std::string Describe() const;

 private:
  std::vector<ParamInfo> params_;
  std::vector<Bucket> buckets_;
  int64_t total_numel_ = 0;
};

}  // namespace gradsync
