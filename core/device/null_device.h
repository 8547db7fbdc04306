// Test-only: a Device that claims a type and a name and does nothing else.
// Its kernels return at once; its memory calls fail with Unimplemented unless
// a test overrides them. For the tests of code that only asks a device what
// it is (a strategy refusing a device it cannot serve) or only needs device
// pointers from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"

namespace gradsync {

class NullDevice : public Device {
 public:
  NullDevice(DeviceType type, std::string name)
      : type_(type), name_(std::move(name)) {}

  DeviceType type() const override { return type_; }
  std::string name() const override { return name_; }

  absl::StatusOr<void*> AllocateBytes(size_t bytes) override;
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override;
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override;
  void CopyOnDevice(float*, const float*, int64_t) override {}
  absl::Status Synchronize() override { return absl::OkStatus(); }

  void Gemm(bool, bool, int, int, int, float, const float*, const float*, float,
            float*) override {}
  void AddRowBias(float*, const float*, int, int) override {}
  void SumRows(const float*, float*, int, int) override {}
  void ReluForward(float*, int64_t) override {}
  void ReluBackward(const float*, float*, int64_t) override {}
  void ReluBackwardOfSum(const float*, const InputTensor&, const InputTensor&,
                         float*, int64_t) override {}
  void SoftmaxCrossEntropy(const float*, const int32_t*, int, int, float*,
                           float*) override {}
  void Scale(float*, int64_t, float) override {}
  void Fill(float*, int64_t, float) override {}
  void SgdUpdate(float*, const float*, float*, int64_t, float, float,
                 float) override {}
  void AdamUpdate(float*, const float*, float*, float*, int64_t, float,
                  const AdamState&, float) override {}
  void Im2Col(const float*, const ConvGeometry&, float*) override {}
  void Col2Im(const float*, const ConvGeometry&, float*) override {}
  void BatchNormForwardTraining(const InputTensor&, int64_t, int, int64_t,
                                const float*, const float*, float, float,
                                float*, float*, float*, float*, float*,
                                const BatchNormEpilogue&) override {}
  void BatchNormForwardInference(const InputTensor&, int64_t, int, int64_t,
                                 const float*, const float*, const float*,
                                 const float*, float, float*,
                                 const BatchNormEpilogue&) override {}
  void BatchNormBackward(const InputTensor&, const InputTensor&, int64_t, int,
                         int64_t, const float*, const float*, const float*,
                         float*, float*, float*, const float*,
                         uint16_t*) override {}
  void MaxPoolForward(const float*, const PoolGeometry&, float*,
                      int32_t*) override {}
  void MaxPoolBackward(const float*, const int32_t*, const PoolGeometry&,
                       float*) override {}
  void GlobalAvgPoolForward(const float*, int, int, int, ActivationLayout,
                            float*) override {}
  void GlobalAvgPoolBackward(const float*, int, int, int, ActivationLayout,
                             float*) override {}
  void Add(float*, const float*, int64_t) override {}

 private:
  const DeviceType type_;
  const std::string name_;
};

}  // namespace gradsync
