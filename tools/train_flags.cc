#include "tools/train_flags.h"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/data/cifar10_reader.h"
#include "core/data/image_augmentation.h"
#include "core/data/zipf_bags.h"
#include "core/device/gpu_selection.h"
#include "core/model/synthetic_model.h"
#include "core/optim/checkpoint_path.h"
#include "core/train/straggler.h"
#include "tools/cluster_flags.h"
#include "tools/trace_flags.h"

ABSL_FLAG(std::string, sync, "local",
          "gradient synchronization strategy: local (one worker), ps "
          "(parameter servers), ring (CPU ring all-reduce over TCP), hybrid "
          "(row-sparse tensors such as embedding tables to the parameter "
          "servers, the rest through the ring), nccl (CUDA builds)");
ABSL_FLAG(std::string, compression, "none",
          "how every bucket travels: none (float32), fp16, bf16 (16-bit "
          "floats, summed in float32), topk:RATIO or randomk:RATIO (the "
          "fraction RATIO in (0, 1] of each bucket's floats as (index, value) "
          "pairs, with error feedback), onebit (scaled signs, with error "
          "feedback)");
ABSL_FLAG(std::string, device, "cpu", "where the model runs: cpu or cuda");
ABSL_FLAG(std::string, precision, "fp32",
          "arithmetic of matrix products and convolutions: fp32 (float32 "
          "throughout, on every device; what parity checks use; the default, "
          "so that no result changes silently), tf32 (--device=cuda: cuBLAS "
          "and cuDNN may use TF32 tensor cores, as PyTorch's convolutions do "
          "by default) or bf16 (mixed precision as PyTorch's bf16 autocast: "
          "products and convolutions take bf16-rounded inputs, sum in "
          "float32 and round their outputs to bf16; float32 master weights, "
          "optimizer, batch norm and gradients handed to the strategy; on "
          "cpu and cuda)");
ABSL_FLAG(std::string, cudnn_graph, "auto",
          "with --device=cuda: whether each convolution also times the "
          "engines of cuDNN's graph API and runs one where it beats the "
          "legacy algorithms: true, false, or auto (the default: true where "
          "convolutions compute NHWC by choice, --cudnn_layout=nhwc and auto "
          "in tf32 and bf16; false under nchw, fastest and auto in fp32); "
          "the manifest records the choice");
ABSL_FLAG(std::string, cudnn_layout, "auto",
          "with --device=cuda, fp32 and tf32: the layout cuDNN computes "
          "convolutions in. auto (the default, the fastest measured on a "
          "GPU: in fp32 as nchw where the model keeps NCHW activations, "
          "ResNet, and NHWC with no copies elsewhere; in tf32 as nhwc); nhwc "
          "(NHWC activations and convolutions); nchw (NCHW as PyTorch's "
          "default tensors, so that cuDNN's NCHW-only algorithms (FFT) "
          "qualify: ResNet keeps its activations NCHW end to end, the CNN "
          "gets NCHW copies around each convolution); fastest (NHWC "
          "activations, each shape's convolution timed at set-up in both "
          "layouts, copies included, and the faster runs). bf16 always "
          "computes in NHWC");
ABSL_FLAG(std::string, gpus, "",
          "with --device=cuda: comma-separated GPU indices (among the visible "
          "GPUs, after CUDA_VISIBLE_DEVICES) for this machine's local ranks; "
          "local rank r uses the (r mod count)-th entry. Empty: local rank mod "
          "the number of visible GPUs");
ABSL_FLAG(int, threads, 0,
          "BLAS threads per worker on the CPU; 0 = the machine's cores divided "
          "by the workers on this host");
ABSL_FLAG(std::string, model, "mlp",
          "mlp (trains for real, shaped by --layers); cnn (a small CNN, "
          "trains for real on an image data set such as Fashion-MNIST) or "
          "resnet18 (ResNet-18 for CIFAR-10-shaped images, 11.2 M parameters, "
          "trains for real; batch norm statistics per worker); embedding (a "
          "bag-of-embeddings classifier over --data=zipf: a table of "
          "--embedding_rows x --embedding_dim floats whose gradient is "
          "row-sparse, mean-pooled, then an MLP head; CPU only); or a "
          "synthetic "
          "model for "
          "communication studies with the tensors of resnet50 (25.6 M "
          "parameters), vgg16 (138 M), bert-base (110 M) or custom "
          "(--custom_params in --custom_tensors): it sleeps --compute_ms per "
          "step and writes deterministic gradients; use it with "
          "--data=synthetic and a small --synthetic_size");
ABSL_FLAG(int64_t, embedding_rows, 100000,
          "--model=embedding and --data=zipf: rows of the embedding table "
          "(the ids' vocabulary)");
ABSL_FLAG(int, embedding_dim, 32, "--model=embedding: floats per table row");
ABSL_FLAG(int, embedding_hidden, 64,
          "--model=embedding: width of the MLP head's hidden layer");
ABSL_FLAG(int, bag_size, 16,
          "--data=zipf: ids per sample, mean-pooled by --model=embedding");
ABSL_FLAG(double, zipf_exponent, 1.1,
          "--data=zipf: ids follow P(rank r) ~ 1/r^exponent (click logs and "
          "word counts: about 1.0-1.2)");
ABSL_FLAG(double, zipf_label_noise, 0.5,
          "--data=zipf: noise added to each class's summed hidden id scores, "
          "in units of that sum's spread; 0.5 caps a model that knew every "
          "id's score near 85%");
ABSL_FLAG(int64_t, custom_params, 25000000,
          "--model=custom: total parameters (float32)");
ABSL_FLAG(int, custom_tensors, 50,
          "--model=custom: number of tensors the parameters are split into");
ABSL_FLAG(double, compute_ms, 0,
          "synthetic models: emulated forward+backward time per step in ms, "
          "spread over the tensors in backward order by size");
ABSL_FLAG(double, compute_forward_share, 0,
          "synthetic models: the part of --compute_ms spent in forward, in "
          "[0, 1), walked in forward order asking for each tensor's "
          "parameters first, so the next forward overlaps the previous "
          "step's synchronization (--overlap_next_forward) as a real "
          "network's does; 0 = all in backward");
ABSL_FLAG(std::string, layers, "784,512,256,10",
          "MLP layer widths: input, hidden..., classes");
ABSL_FLAG(std::string, data, "fashion-mnist",
          "data set: fashion-mnist (IDX files in --data_dir), cifar10 (the "
          "binary version's files in --data_dir), synthetic, or zipf (bags "
          "of --bag_size ids from a Zipf law over --embedding_rows ids, "
          "--synthetic_size training samples, two classes, for "
          "--model=embedding)");
ABSL_FLAG(std::string, data_dir, gradsync::kDefaultFashionMnistDir,
          "fashion-mnist: folder with "
          "{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]; cifar10: folder "
          "with data_batch_{1..5}.bin and test_batch.bin, or the "
          "cifar-10-batches-bin folder inside it");
ABSL_FLAG(int64_t, synthetic_size, 8192,
          "training samples of --data=synthetic and --data=zipf (test set: a "
          "quarter)");
ABSL_FLAG(std::string, synthetic_shape, "",
          "--data=synthetic: image shape CxHxW (e.g. 3x32x32) with 10 "
          "classes; empty: 3x32x32 (CIFAR-10's) for --model=resnet18, "
          "1x28x28 (Fashion-MNIST's) for --model=cnn, otherwise flat samples "
          "of the first --layers width with the last --layers width of "
          "classes");
ABSL_FLAG(std::string, augment, "",
          "training-set augmentation applied as batches are built: crop_flip "
          "(random crop after padding by --augment_padding, random "
          "horizontal flip) or none; empty: crop_flip for --data=cifar10, "
          "none otherwise. Drawn from --seed, the epoch and the sample, so "
          "every strategy and worker count sees the same samples; never "
          "applied to the test set");
ABSL_FLAG(int, augment_padding, 4,
          "--augment=crop_flip: black pixels added on each side before the "
          "crop");
ABSL_FLAG(int, batch_size, 64, "samples per worker per step");
ABSL_FLAG(int64_t, epochs, 5, "passes over the training set");
ABSL_FLAG(int64_t, max_steps, 0, "stop after this many steps; 0 = no limit");
ABSL_FLAG(uint64_t, seed, 1, "seed of the initial parameters and data order");
ABSL_FLAG(bool, shuffle, true, "reshuffle the data every epoch");
ABSL_FLAG(bool, drop_last, false,
          "drop the tail of the data set that does not divide among workers");
ABSL_FLAG(double, bucket_mb, 0,
          "gradient bucket cap in MiB; buckets are synchronized as soon as "
          "backward has produced them. 0 = auto: a quarter of the model, "
          "within [1, 25] MiB (25 is PyTorch DDP's default), so backward "
          "overlaps communication (core/sync/bucket_size_rule.h); logged and "
          "recorded in the manifest. A cap that holds the whole model is "
          "warned about.");
ABSL_FLAG(bool, autotune, false,
          "before the first step, time a few bucket caps around --bucket_mb's "
          "auto value (x1, x1/4, x1/2, x2, x4 within [0.25, 25] MiB) on the "
          "strategy in use, keep the fastest by the slowest worker (worker 0 "
          "decides for all), and undo the trial steps so training is as if "
          "started with that cap; one JSON line per trial in "
          "<--metrics_dir>/autotune.jsonl, the choice in the manifest. An "
          "explicit --bucket_mb is kept. Not with --ps_update=server or "
          "--ps_consistency=ssp|asp (docs/compare.md)");
ABSL_FLAG(int, autotune_steps, 3,
          "--autotune: timed steps per trial (after one untimed)");
ABSL_FLAG(bool, overlap_next_forward, true,
          "start the next step's forward as soon as the buckets its first "
          "layers read are synchronized and updated, instead of after the "
          "whole synchronization (strategies that cannot tell one bucket's "
          "completion wait for all, as with false); the same parameters "
          "either way. A step's sync_wait_ms is then the time the following "
          "forward waits for it (core/train/trainer.h)");
ABSL_FLAG(std::string, schedule, "fifo",
          "the order a strategy sends ready gradients in: fifo (buckets as "
          "backward makes them, last layers first) or priority (buckets cut "
          "into --partition_kb partitions, the one the next forward reads "
          "first sent first, at most --credit_kb in flight so a late "
          "first-layer partition overtakes queued ones; core/sync/schedule.h)");
ABSL_FLAG(int64_t, partition_kb, 0,
          "--schedule=priority: partition size in KiB; 0 = derived by the "
          "strategy");
ABSL_FLAG(int64_t, credit_kb, 0,
          "--schedule=priority: KiB a rank keeps in flight; 0 = derived by "
          "the strategy");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd or adam");
ABSL_FLAG(double, lr, 0.05, "learning rate (before --lr_scaling)");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum");
ABSL_FLAG(double, weight_decay, 0, "L2 weight decay");
ABSL_FLAG(std::string, lr_scaling, "none",
          "learning rate scaling with the number of workers: linear or none");
ABSL_FLAG(bool, eval, true, "evaluate on the test set after every epoch");
ABSL_FLAG(int64_t, eval_every, 0,
          "worker 0 also evaluates the whole test set on its own parameters "
          "every this many steps and writes an 'eval' line (accuracy against "
          "time, for time-to-accuracy); 0: never");
ABSL_FLAG(int64_t, eval_samples, 0,
          "--eval_every evaluates the first this many test samples (0: all)");
ABSL_FLAG(std::string, straggler, "",
          "experiments: RANK:MS[:EVERY][,...]: worker RANK sleeps MS "
          "milliseconds before the compute of every (EVERY-th) step, in any "
          "strategy");
ABSL_FLAG(double, straggler_jitter_ms, 0,
          "experiments: every worker sleeps a random time in [0, this) ms "
          "before each step (reproducible from --seed)");
ABSL_FLAG(std::string, checkpoint, "",
          "checkpoint file: worker 0 writes the model, optimizer state, step "
          "and sampler position here (atomically: temporary file, fsync, "
          "rename) after every epoch, every --checkpoint_every steps and the "
          "last step; with --ps_update=server each parameter server k also "
          "writes its shard to <path>.server<k> (the one before kept as "
          "<path>.server<k>.previous). --resume reads it on every worker (and "
          "server), so on a cluster put it on shared storage");
ABSL_FLAG(int64_t, checkpoint_every, 0,
          "also write --checkpoint after every this many global steps; 0 = "
          "only at epoch ends and the last step");
ABSL_FLAG(bool, resume, false,
          "continue from --checkpoint (which must exist and be intact): same "
          "parameters, optimizer state, step and data order as the run that "
          "wrote it, so the result equals an uninterrupted run; --epochs and "
          "--max_steps count from the start of the original run. Needs the "
          "same model, --seed, --batch_size and number of workers (and "
          "servers and --ps_chunk_kb for --ps_update=server)");
ABSL_FLAG(bool, overwrite_checkpoint, false,
          "start a new run even though --checkpoint exists, replacing it at "
          "the first write; without it (or --resume) an existing checkpoint "
          "refuses the run, so that saved progress is never lost by a "
          "forgotten --resume");
ABSL_FLAG(std::string, metrics_dir, "",
          "write per-step JSON lines and summary.json here; empty = none");
ABSL_FLAG(bool, progress, true, "print a progress line on worker 0");
ABSL_FLAG(int64_t, check_params_every, 0,
          "every this many steps, check that all workers hold identical "
          "parameters (CRC-32 through the coordinator); 0 = only at start-up "
          "and after the last step (always compared then, except under "
          "--ps_consistency=ssp|asp, where replicas may differ)");
ABSL_FLAG(std::string, dump_params, "",
          "write the final parameters (raw float32) to <path>.worker<rank>");
ABSL_FLAG(int64_t, warmup_steps, 5, "steps left out of the summary's means");
// --trace and --trace_steps are tools/trace_flags.cc's, --timeout_s is
// tools/cluster_flags.cc's: `gradsync server` reads them too.
ABSL_FLAG(int, fault_rank, -1,
          "testing: this worker ends itself at --fault_step (see --fault)");
ABSL_FLAG(int64_t, fault_step, 0,
          "testing: the step at which --fault_rank fails");
ABSL_FLAG(std::string, fault, "exit",
          "testing: how --fault_rank fails: exit (code 3) or kill (SIGKILL)");

namespace gradsync {

absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags() {
  TrainerOptions o;
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.max_steps = absl::GetFlag(FLAGS_max_steps);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.shuffle = absl::GetFlag(FLAGS_shuffle);
  o.drop_last = absl::GetFlag(FLAGS_drop_last);
  std::string augment = absl::GetFlag(FLAGS_augment);
  if (augment.empty()) {
    augment = absl::GetFlag(FLAGS_data) == "cifar10" ? "crop_flip" : "none";
    // The run's manifest echoes the flags: record what the default chose.
    absl::SetFlag(&FLAGS_augment, augment);
  }
  absl::StatusOr<AugmentationMode> mode = ParseAugmentationMode(augment);
  if (!mode.ok()) return Annotate(mode.status(), "--augment");
  o.augmentation.mode = *mode;
  o.augmentation.padding = absl::GetFlag(FLAGS_augment_padding);
  if (o.augmentation.padding < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--augment_padding=", o.augmentation.padding, " must be >= 0"));
  }
  o.bucket_mb = absl::GetFlag(FLAGS_bucket_mb);
  o.overlap_next_forward = absl::GetFlag(FLAGS_overlap_next_forward);
  o.sync = absl::GetFlag(FLAGS_sync);
  {
    absl::StatusOr<ScheduleKind> kind =
        ParseScheduleKind(absl::GetFlag(FLAGS_schedule));
    if (!kind.ok()) return kind.status();
    o.schedule.kind = *kind;
    // Bounded before the conversion to bytes, so no value wraps around.
    constexpr int64_t kMaxKb = int64_t{1} << 30;  // 1 TiB
    for (const auto& [flag, kb] :
         {std::pair<const char*, int64_t>{"--partition_kb",
                                          absl::GetFlag(FLAGS_partition_kb)},
          {"--credit_kb", absl::GetFlag(FLAGS_credit_kb)}}) {
      if (kb > kMaxKb) {
        return absl::InvalidArgumentError(absl::StrCat(
            flag, "=", kb, " is larger than any model; use at most ", kMaxKb,
            " or 0 (derived by the strategy)"));
      }
    }
    o.schedule.partition_bytes = absl::GetFlag(FLAGS_partition_kb) * 1024;
    o.schedule.credit_bytes = absl::GetFlag(FLAGS_credit_kb) * 1024;
    RETURN_IF_ERROR(ValidateScheduleOptions(o.schedule));
  }
  ASSIGN_OR_RETURN(o.compression,
                   CompressionSpec::Parse(absl::GetFlag(FLAGS_compression)));
  o.optimizer.kind = absl::GetFlag(FLAGS_optimizer);
  o.optimizer.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  o.optimizer.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
  o.optimizer.weight_decay =
      static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  o.lr_scaling = absl::GetFlag(FLAGS_lr_scaling);
  o.evaluate = absl::GetFlag(FLAGS_eval);
  o.checkpoint_path = absl::GetFlag(FLAGS_checkpoint);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.resume = absl::GetFlag(FLAGS_resume);
  if (o.checkpoint_every < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_every=", o.checkpoint_every, " must be >= 0"));
  }
  if ((o.checkpoint_every > 0 || o.resume) && o.checkpoint_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.resume ? "--resume" : "--checkpoint_every",
                     " needs --checkpoint=<path> (the file to ",
                     o.resume ? "read" : "write", ")"));
  }
  o.metrics_dir = absl::GetFlag(FLAGS_metrics_dir);
  o.progress = absl::GetFlag(FLAGS_progress);
  o.check_params_every = absl::GetFlag(FLAGS_check_params_every);
  if (o.check_params_every < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--check_params_every=", o.check_params_every,
        " must be >= 0 (0: at start-up and after the last step only)"));
  }
  o.dump_params = absl::GetFlag(FLAGS_dump_params);
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  if (o.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--warmup_steps=", o.warmup_steps,
                     " must be >= 0 (steps left out of the summary's means)"));
  }
  o.autotune = absl::GetFlag(FLAGS_autotune);
  o.autotune_steps = absl::GetFlag(FLAGS_autotune_steps);
  // Each trial runs this many steps on every cap tried and is then undone:
  // past kMaxAutotuneSteps the trials would be a training run of their own.
  constexpr int kMaxAutotuneSteps = 100;
  if (o.autotune_steps < 1 || o.autotune_steps > kMaxAutotuneSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("--autotune_steps=", o.autotune_steps, " must be in 1..",
                     kMaxAutotuneSteps, " (timed steps per bucket cap tried)"));
  }
  ASSIGN_OR_RETURN(const TraceSettings trace, TraceSettingsFromFlags());
  o.trace_path = trace.path;
  o.trace_steps = trace.steps;
  // A synthetic model's predictions mean nothing (synthetic_model.h).
  if (IsSyntheticModelFlag()) o.evaluate = false;
  o.fault_rank = absl::GetFlag(FLAGS_fault_rank);
  o.fault_step = absl::GetFlag(FLAGS_fault_step);
  o.fault = absl::GetFlag(FLAGS_fault);
  ASSIGN_OR_RETURN(o.slowness.stragglers,
                   ParseStragglers(absl::GetFlag(FLAGS_straggler)));
  o.slowness.jitter_ms = absl::GetFlag(FLAGS_straggler_jitter_ms);
  o.slowness.seed = o.seed;
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.eval_samples = absl::GetFlag(FLAGS_eval_samples);
  if (o.eval_every < 0 || o.eval_samples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--eval_every=", o.eval_every,
                     " and --eval_samples=", o.eval_samples, " must be >= 0"));
  }
  if (o.fault != "exit" && o.fault != "kill") {
    return absl::InvalidArgumentError(
        absl::StrCat("--fault=", o.fault, " must be exit or kill"));
  }
  ASSIGN_OR_RETURN(o.timeout, PeerTimeoutFromFlags());
  if (o.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch_size=", o.batch_size,
                     " must be at least 1 (samples per worker per step)"));
  }
  if (o.epochs < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--epochs=", o.epochs, " must be at least 1"));
  }
  if (o.max_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_steps=", o.max_steps, " must be >= 0"));
  }
  // Every model by name, so that a typo is named before any data loads.
  if (const std::string model = absl::GetFlag(FLAGS_model);
      model != "mlp" && model != "cnn" && model != "resnet18" &&
      model != "embedding") {
    const std::vector<std::string> synthetic = SyntheticArchitectures();
    if (std::find(synthetic.begin(), synthetic.end(), model) ==
        synthetic.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--model=", model,
                       " is not a model; choose one of mlp, cnn, "
                       "resnet18, embedding (computed for real) or ",
                       absl::StrJoin(synthetic, ", "),
                       " (synthetic: real sizes, emulated compute)"));
    }
  }
  // Refused here, before any process starts, rather than at each worker's
  // Bind (core/model/embedding_model.cc says why it is CPU only).
  if (absl::GetFlag(FLAGS_model) == "embedding" &&
      absl::GetFlag(FLAGS_device) != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model=embedding runs on the CPU only (its table lookup and "
        "gradient scatter run on the host), not --device=",
        absl::GetFlag(FLAGS_device), ": use --device=cpu"));
  }
  // The cap becomes bytes (an int64): below one float it would mean no cap
  // at all (ParamLayout's one bucket, the opposite of a tiny cap), and above
  // 1 TiB the cast would overflow long before any model needs it.
  constexpr double kMaxBucketMb = 1 << 20;
  // 0 is the default: derived from the model (core/sync/bucket_size_rule.h).
  if (o.bucket_mb != 0 &&
      (!(o.bucket_mb * (1 << 20) >= 4) || !(o.bucket_mb <= kMaxBucketMb))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--bucket_mb=", o.bucket_mb,
        " is not a bucket cap: pass 0 (derived from the model), or at least "
        "4 bytes (",
        4.0 / (1 << 20),
        " MiB: every parameter tensor its own bucket) and at most ",
        kMaxBucketMb, " MiB (1 TiB: one bucket for any model)"));
  }
  return o;
}

absl::StatusOr<MlpOptions> MlpOptionsFromFlags() {
  MlpOptions options;
  ASSIGN_OR_RETURN(options.widths,
                   ParseLayerWidths(absl::GetFlag(FLAGS_layers)));
  return options;
}

namespace {

// The models that compute for real, beside the MLP.
bool IsConvolutionalModel(const std::string& model) {
  return model == "cnn" || model == "resnet18";
}

// The image shape of `data` for --model=`model`, or an error saying what the
// model needs when the data set's rows are not images.
absl::StatusOr<ImageInput> ImageInputOf(const std::string& model,
                                        const DatasetPair& data) {
  const Dataset& train = data.train;
  if (train.channels < 1 || train.height < 1 || train.width < 1 ||
      int64_t{train.channels} * train.height * train.width !=
          train.feature_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model=", model, " needs images (channels x height x width), but ",
        train.name, " gives flat rows of ", train.feature_dim,
        " features; use an image data set (--data=fashion-mnist",
        model == "resnet18"
            ? ", --data=cifar10 or CIFAR-shaped --data=synthetic"
            : "",
        ")"));
  }
  ImageInput input;
  input.channels = train.channels;
  input.height = train.height;
  input.width = train.width;
  input.num_classes = train.num_classes;
  return input;
}

}  // namespace

bool UsesParameterServers(const std::string& sync) {
  return sync == "ps" || sync == "hybrid";
}

bool IsSyntheticModelFlag() {
  const std::string model = absl::GetFlag(FLAGS_model);
  return model != "mlp" && model != "embedding" && !IsConvolutionalModel(model);
}

namespace {

// --model=embedding over --data=zipf's bags. The optimizer's slots make the
// table's update dense: said once here, where the model and the optimizer
// meet.
absl::StatusOr<std::unique_ptr<Model>> CreateEmbeddingModelFromFlags(
    const DatasetPair& data) {
  if (absl::GetFlag(FLAGS_data) != "zipf") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model=embedding reads bags of ids, but --data=",
        absl::GetFlag(FLAGS_data), " gives ", data.train.feature_dim,
        " features per sample: pass --data=zipf"));
  }
  EmbeddingModelOptions options;
  options.vocabulary = absl::GetFlag(FLAGS_embedding_rows);
  options.dim = absl::GetFlag(FLAGS_embedding_dim);
  options.hidden = absl::GetFlag(FLAGS_embedding_hidden);
  options.bag_size = data.train.feature_dim;
  options.num_classes = data.train.num_classes;
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateEmbeddingModel(options));
  const double momentum = absl::GetFlag(FLAGS_momentum);
  const double weight_decay = absl::GetFlag(FLAGS_weight_decay);
  const std::string optimizer = absl::GetFlag(FLAGS_optimizer);
  if (optimizer != "sgd" || momentum != 0 || weight_decay != 0) {
    GS_LOG(WARNING)
        << "--model=embedding with --optimizer=" << optimizer
        << " --momentum=" << momentum << " --weight_decay=" << weight_decay
        << ": the optimizer's state (velocity, Adam's moments, decay) moves "
           "every row of the "
        << options.vocabulary * options.dim * 4 / (1 << 20)
        << " MiB table every step, not only the rows a step touched (the "
           "math of PyTorch's optimizers on a dense embedding gradient). "
           "The gradient that strategies move stays row-sparse. On the CPU "
           "the state of rows left untouched for some 800 steps also decays "
           "into denormal floats, which x86 computes several times slower "
           "(the optimizer's step slows down after that). "
           "--optimizer=sgd --momentum=0 --weight_decay=0 leaves untouched "
           "rows untouched";
  }
  return model;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateModelFromFlags(
    const DatasetPair& data) {
  const std::string model = absl::GetFlag(FLAGS_model);
  const double compute_ms = absl::GetFlag(FLAGS_compute_ms);
  if (model == "mlp") {
    if (compute_ms != 0) {
      return absl::InvalidArgumentError(
          "--compute_ms applies to the synthetic models "
          "(--model=resnet50|vgg16|"
          "bert-base|custom); the MLP computes for real");
    }
    ASSIGN_OR_RETURN(MlpOptions mlp, MlpOptionsFromFlags());
    return CreateMlp(mlp);
  }
  if (model == "embedding") {
    if (compute_ms != 0) {
      return absl::InvalidArgumentError(
          "--compute_ms applies to the synthetic models; --model=embedding "
          "computes for real");
    }
    absl::StatusOr<std::unique_ptr<Model>> created =
        CreateEmbeddingModelFromFlags(data);
    if (!created.ok()) return Annotate(created.status(), "--model=embedding");
    return created;
  }
  if (IsConvolutionalModel(model)) {
    if (compute_ms != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--compute_ms applies to the synthetic models; --model=", model,
          " computes for real"));
    }
    ASSIGN_OR_RETURN(const ImageInput input, ImageInputOf(model, data));
    absl::StatusOr<std::unique_ptr<Model>> created;
    if (model == "cnn") {
      CnnOptions options;
      options.input = input;
      created = CreateCnn(options);
    } else {
      ResNetOptions options;
      options.input = input;
      created = CreateResNet(options);
    }
    if (!created.ok()) {
      return Annotate(created.status(), absl::StrCat("--model=", model));
    }
    return created;
  }
  SyntheticModelOptions options;
  options.architecture = model;
  options.custom_params = absl::GetFlag(FLAGS_custom_params);
  options.custom_tensors = absl::GetFlag(FLAGS_custom_tensors);
  options.compute_ms = compute_ms;
  options.forward_share = absl::GetFlag(FLAGS_compute_forward_share);
  // The synthetic model ignores its inputs, so it takes whatever shape the
  // data set has.
  options.input_dim = data.train.feature_dim;
  options.num_classes = data.train.num_classes;
  absl::StatusOr<std::unique_ptr<Model>> created =
      CreateSyntheticModel(options);
  if (!created.ok())
    return Annotate(created.status(), absl::StrCat("--model=", model));
  return created;
}

namespace {

struct ImageShape {
  int channels = 0;
  int height = 0;
  int width = 0;
};

// "3x32x32" -> {3, 32, 32}.
absl::StatusOr<ImageShape> ParseImageShape(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, 'x');
  ImageShape shape;
  int* fields[] = {&shape.channels, &shape.height, &shape.width};
  bool ok = parts.size() == 3;
  for (size_t i = 0; ok && i < 3; ++i) {
    ok = absl::SimpleAtoi(parts[i], fields[i]) && *fields[i] >= 1 &&
         *fields[i] <= 4096;
  }
  // A sample of more than 2^24 values (64 MiB) is a typo, not an experiment.
  ok = ok && int64_t{shape.channels} * shape.height * shape.width <= 1 << 24;
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("--synthetic_shape=", text,
                     " must be CxHxW with each of C, H, W in 1..4096 and "
                     "C*H*W <= 16777216, e.g. 3x32x32"));
  }
  return shape;
}

// The image shape --data=synthetic gets: --synthetic_shape, else the one the
// image models are made for; channels 0 means flat samples.
absl::StatusOr<ImageShape> SyntheticImageShapeFromFlags() {
  const std::string text = absl::GetFlag(FLAGS_synthetic_shape);
  if (!text.empty()) return ParseImageShape(text);
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model == "resnet18") {
    return ImageShape{kCifar10Channels, kCifar10Height, kCifar10Width};
  }
  if (model == "cnn") return ImageShape{1, 28, 28};
  return ImageShape{};
}

}  // namespace

absl::Status CheckDataFlags() {
  const std::string data = absl::GetFlag(FLAGS_data);
  if (data == "synthetic") {
    return SyntheticImageShapeFromFlags().status();
  }
  if (data == "zipf") {
    if (absl::GetFlag(FLAGS_model) != "embedding") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--data=zipf gives bags of ids for --model=embedding, not features "
          "for --model=",
          absl::GetFlag(FLAGS_model)));
    }
    return absl::OkStatus();
  }
  if (data == "fashion-mnist" || data == "mnist") return absl::OkStatus();
  if (data == "cifar10") {
    // --data_dir's default is Fashion-MNIST's Debian folder, which never
    // holds CIFAR-10: say what to pass rather than report its absence.
    if (absl::GetFlag(FLAGS_data_dir) == kDefaultFashionMnistDir) {
      return absl::InvalidArgumentError(
          "--data=cifar10 needs --data_dir=<folder of CIFAR-10's binary "
          "version: data_batch_1.bin .. data_batch_5.bin and "
          "test_batch.bin, or the cifar-10-batches-bin folder inside it>; "
          "download cifar-10-binary.tar.gz from "
          "https://www.cs.toronto.edu/~kriz/cifar.html (no Debian package "
          "carries it) or write the files with tools/fetch_cifar10.py "
          "--out=DIR, or use --data=synthetic for CIFAR-shaped random "
          "images");
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown --data=", data,
      "; choose fashion-mnist (IDX files in --data_dir), cifar10 (binary "
      "files in --data_dir), synthetic or zipf (for --model=embedding)"));
}

absl::StatusOr<DatasetPair> LoadDatasetFromFlags() {
  RETURN_IF_ERROR(CheckDataFlags());
  const std::string data = absl::GetFlag(FLAGS_data);
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  if (data == "synthetic") {
    SyntheticOptions options;
    options.train_size = absl::GetFlag(FLAGS_synthetic_size);
    options.test_size = std::max<int64_t>(1, options.train_size / 4);
    options.seed = absl::GetFlag(FLAGS_seed);
    ASSIGN_OR_RETURN(const ImageShape shape, SyntheticImageShapeFromFlags());
    if (shape.channels > 0) {
      // Random images in the shape the image models take, 10 classes like
      // CIFAR-10 and Fashion-MNIST.
      options.channels = shape.channels;
      options.height = shape.height;
      options.width = shape.width;
      options.feature_dim = shape.channels * shape.height * shape.width;
      options.num_classes = 10;
      return MakeSynthetic(options);
    }
    ASSIGN_OR_RETURN(std::vector<int> widths,
                     ParseLayerWidths(absl::GetFlag(FLAGS_layers)));
    options.feature_dim = widths.front();
    options.num_classes = widths.back();
    return MakeSynthetic(options);
  }
  if (data == "zipf") {
    ZipfBagsOptions options;
    options.train_size = absl::GetFlag(FLAGS_synthetic_size);
    options.test_size = std::max<int64_t>(1, options.train_size / 4);
    options.vocabulary = absl::GetFlag(FLAGS_embedding_rows);
    options.bag_size = absl::GetFlag(FLAGS_bag_size);
    options.exponent = absl::GetFlag(FLAGS_zipf_exponent);
    options.label_noise = absl::GetFlag(FLAGS_zipf_label_noise);
    options.seed = absl::GetFlag(FLAGS_seed);
    absl::StatusOr<DatasetPair> made = MakeZipfBags(options);
    if (!made.ok()) {
      return Annotate(made.status(),
                      "--data=zipf (--embedding_rows, --bag_size, "
                      "--zipf_exponent, --zipf_label_noise, --synthetic_size)");
    }
    return made;
  }
  if (data == "fashion-mnist" || data == "mnist") {
    return LoadMnistFormat(data_dir);
  }
  // cifar10: CheckDataFlags knew every other name.
  return LoadCifar10(data_dir);
}

absl::StatusOr<DeviceOptions> DeviceOptionsFromFlags(int local_rank,
                                                     int local_world) {
  DeviceOptions options;
  ASSIGN_OR_RETURN(options.type, ParseDeviceType(absl::GetFlag(FLAGS_device)));
  ASSIGN_OR_RETURN(options.precision,
                   ParsePrecision(absl::GetFlag(FLAGS_precision)));
  ASSIGN_OR_RETURN(options.cudnn_layout,
                   ParseConvolutionLayout(absl::GetFlag(FLAGS_cudnn_layout)));
  ASSIGN_OR_RETURN(options.cudnn_graph,
                   ParseCudnnGraph(absl::GetFlag(FLAGS_cudnn_graph)));
  if (!options.cudnn_graph.has_value() && options.type == DeviceType::kCuda) {
    // The manifest echoes the flags: record what auto chose.
    absl::SetFlag(&FLAGS_cudnn_graph, CudnnGraphOf(options) ? "true" : "false");
  }
  options.gpu_index = local_rank;
  // Only a CUDA run reads --gpus, so a CPU run is not refused for it.
  if (options.type == DeviceType::kCuda) {
    absl::StatusOr<std::vector<int>> gpus =
        ParseGpuList(absl::GetFlag(FLAGS_gpus));
    if (!gpus.ok()) {
      return Annotate(gpus.status(),
                      absl::StrCat("--device=cuda, local rank ", local_rank));
    }
    options.gpus = *std::move(gpus);
  }
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads=", threads, " must be >= 0"));
  }
  if (threads == 0) {
    // Oversubscribing the cores with BLAS threads of several workers is the
    // quickest way to make every strategy look slow.
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    threads = std::max(1, cores / std::max(1, local_world));
  }
  options.cpu_threads = threads;
  return options;
}

absl::Status CheckCheckpointPathFromFlags(int num_servers) {
  CheckpointPathOptions options;
  options.resume = absl::GetFlag(FLAGS_resume);
  options.overwrite = absl::GetFlag(FLAGS_overwrite_checkpoint);
  options.num_servers = num_servers;
  if (options.resume && options.overwrite) {
    return absl::InvalidArgumentError(
        "--resume continues --checkpoint and --overwrite_checkpoint replaces "
        "it: pass one of them");
  }
  return CheckCheckpointPath(absl::GetFlag(FLAGS_checkpoint), options);
}

}  // namespace gradsync
