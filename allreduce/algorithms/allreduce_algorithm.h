// What every CPU all-reduce of the family offers the strategy that runs it
// (allreduce/allreduce_sync.h): sum a float buffer in place over all ranks,
// then scale it. The ring (ring_allreduce.h), halving-doubling, the double
// binary tree, the hierarchical scheme and the α–β selector all implement it,
// so one GradientSync runs any of them with the same buckets, overlap, metrics
// and failure handling.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace gradsync {

class AllReduceAlgorithm {
 public:
  virtual ~AllReduceAlgorithm() = default;
  // Sums `count` floats at `data` over all ranks in place, then multiplies by
  // `scale`. Every rank calls Run with the same count and `tag` in the same
  // order; all end with bitwise identical results. After an error the
  // algorithm refuses further work.
  virtual absl::Status Run(float* data, int64_t count, float scale,
                           uint32_t tag) = 0;
  // Payload bytes moved so far (headers excluded), for StepStats.
  virtual int64_t bytes_sent() const = 0;
  virtual int64_t bytes_received() const = 0;
  // The most a send moves before the receiving peer has entered the same
  // round (peer_exchange.h's clear to send); 0: never wait. The ring, which
  // keeps its two neighbours for good, ignores it.
  virtual void SetEagerBytes(int64_t bytes) {}
  // Run-level figures for the run summary, a JSON object.
  virtual std::string SummaryJson() const { return "{}"; }
};

}  // namespace gradsync
