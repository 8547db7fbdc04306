#include "core/model/model_fixture.h"

#include <random>
#include <utility>

#include "core/model/param_init.h"
#include "gtest/gtest.h"

namespace gradsync {

BoundModel::BoundModel(std::unique_ptr<Model> created, int batch, uint64_t seed,
                       bool reference)
    : device(1, /*reference_convolutions=*/reference,
             /*reference_batch_norm=*/reference),
      model(std::move(created)) {
  layout = std::make_unique<ParamLayout>(
      *ParamLayout::Create(model->ParamSpecs(), 1 << 20));
  params = *device.Allocate<float>(layout->total_numel());
  grads = *device.Allocate<float>(layout->total_numel());
  EXPECT_TRUE(model->Bind(device, *layout, params, grads, batch).ok());
  model->InitParams(seed, *layout, params);
  inputs.resize(int64_t{batch} * model->input_dim());
  std::mt19937_64 generator = ParamGenerator(seed + 1, 0);
  FillUniform(generator, 1.0f, inputs.data(), inputs.size());
  for (int i = 0; i < batch; ++i) labels.push_back(i % model->num_classes());
}

double BoundModel::Loss(int batch) {
  float loss = 0;
  EXPECT_TRUE(
      model
          ->ForwardBackward(inputs.data(), labels.data(), batch, &loss, nullptr)
          .ok());
  return loss;
}

void ExpectModelGradientsMatch(BoundModel& bound, int batch,
                               const GradientCheckOptions& options) {
  bound.Loss(batch);
  // The analytic gradients are copied out: every loss the check evaluates
  // overwrites the gradient buffer.
  const std::vector<float> analytic(bound.grads,
                                    bound.grads + bound.layout->total_numel());
  for (const ParamInfo& info : bound.layout->params()) {
    ExpectGradientMatches(
        info.spec.name, bound.params + info.offset, info.numel,
        analytic.data() + info.offset, [&] { return bound.Loss(batch); },
        options);
  }
}

}  // namespace gradsync
