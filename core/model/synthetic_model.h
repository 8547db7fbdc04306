// Models for communication studies: the parameter tensors of ResNet-50,
// VGG-16, BERT-base or a custom size, without their arithmetic.
//
// What a gradient-synchronization strategy sees of a model is the list of
// tensors, their sizes and the moments their gradients become final (and,
// with --compute_forward_share, the moments forward reads them). A
// synthetic model reproduces exactly that: ForwardBackward spends
// --compute_ms per step (sleeping, as if an accelerator computed while the
// CPU is free to communicate), walking the tensors in backward order with
// each tensor's share of the time proportional to its size, and calls
// ready(param) after each tensor so buckets are handed off during backward.
//
// The gradients are deterministic and exactly representable, so the averages
// a strategy produces can be checked bit for bit:
//
//   grad[param][i] = Pattern((i + Phase(step, param)) mod 4099) + mean(labels)
//
// Pattern() is an integer in [-8, 8]; the phase differs per parameter and
// step, so a chunk put at the wrong offset shows (4099 is prime: no
// power-of-two chunk size is a multiple of the period). The mean of the
// batch's labels makes ranks differ and makes the gradient a mean over the
// batch, like a real loss: N workers with batch b then average to the
// gradient of one worker with batch N·b, exactly when b is a power of two.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync/param_layout.h"
#include "core/model/model.h"

namespace gradsync {

struct SyntheticModelOptions {
  // "resnet50", "vgg16", "bert-base" or "custom".
  std::string architecture = "custom";
  // custom: total parameters, split into custom_tensors tensors of (nearly)
  // equal size.
  int64_t custom_params = 25'000'000;
  int custom_tensors = 50;
  // Emulated forward+backward time per step, spread over the tensors in
  // backward order in proportion to their sizes. 0: no waiting.
  double compute_ms = 0;
  // The part of compute_ms spent in forward, in [0, 1): forward walks the
  // tensors in forward order, asking for each one's parameters before its
  // share of the time (ParamsNeededCallback), so the next step's forward
  // can overlap the previous step's synchronization as a real model's does.
  // 0: all of it in backward, and every parameter asked for at once.
  double forward_share = 0;
  // The data set's shape, which the model accepts whatever it is.
  int input_dim = 784;
  int num_classes = 10;
};

// The architectures CreateSyntheticModel knows, for help texts and errors.
std::vector<std::string> SyntheticArchitectures();

// The parameter tensors of `options.architecture` in forward order, named and
// shaped as in torchvision (ResNet-50, VGG-16) and Hugging Face (BERT-base):
//   resnet50   161 tensors, 25,557,032 parameters
//   vgg16       32 tensors, 138,357,544 parameters (classifier.0: 25088×4096)
//   bert-base  199 tensors, 109,482,240 parameters
absl::StatusOr<std::vector<ParamSpec>> SyntheticParamSpecs(
    const SyntheticModelOptions& options);

absl::StatusOr<std::unique_ptr<Model>> CreateSyntheticModel(
    const SyntheticModelOptions& options);

// The gradient value the model writes (see the file comment), for tests that
// check what a strategy averaged. `step` counts ForwardBackward calls from 0.
float SyntheticGradient(int64_t step, int param, int64_t element,
                        float label_mean);

}  // namespace gradsync
