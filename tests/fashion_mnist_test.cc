// A real single-worker run on Fashion-MNIST (Debian's dataset-fashion-mnist):
// two epochs of the default MLP must reach 80% test accuracy, and the run must
// leave its metrics, summary and checkpoint behind.
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/data/dataset.h"
#include "core/device/device.h"
#include "core/sync/gradient_sync.h"
#include "core/optim/checkpoint.h"
#include "core/model/model.h"
#include "core/train/trainer.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

TEST(FashionMnistTest, DefaultMlpReachesEightyPercentInTwoEpochs) {
  struct stat st;
  if (stat(kDefaultFashionMnistDir, &st) != 0) {
    GTEST_SKIP()
        << "Fashion-MNIST is not installed at " << kDefaultFashionMnistDir
        << " (apt-get install dataset-fashion-mnist; tools/test.sh does it)";
  }
  auto data = LoadMnistFormat(kDefaultFashionMnistDir);
  ASSERT_TRUE(data.ok()) << data.status();
  auto model = CreateMlp(MlpOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  DeviceOptions device_options;
  device_options.cpu_threads = 2;
  auto device = CreateDevice(device_options);
  ASSERT_TRUE(device.ok()) << device.status();
  auto sync = GradientSyncRegistry::Create("local", SyncContext{});
  ASSERT_TRUE(sync.ok()) << sync.status();

  const std::string dir = std::string(getenv("TEST_TMPDIR")) + "/run";
  TrainerOptions options;
  options.epochs = 2;
  options.batch_size = 64;
  options.metrics_dir = dir;
  options.checkpoint_path = dir + "/model.ckpt";
  options.progress = false;
  auto result = RunTraining(options, ProcessIdentity{}, **model, *data,
                            **device, **sync, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();

  EXPECT_GE(result->test_accuracy, 0.80);
  EXPECT_EQ(result->steps, 2 * ((60000 + 63) / 64));

  // One JSON line per step with the documented fields, then an epoch line.
  std::ifstream lines(result->metrics_path);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  auto first = nlohmann::json::parse(line);
  for (const char* field :
       {"rank", "step", "epoch", "loss", "step_ms", "compute_ms",
        "sync_wait_ms", "bytes_sent", "bytes_recv", "samples_per_s"}) {
    EXPECT_TRUE(first.contains(field)) << field << " missing from " << line;
  }
  double first_loss = first["loss"], last_loss = 0;
  int epochs = 0;
  while (std::getline(lines, line)) {
    auto record = nlohmann::json::parse(line);
    if (record["type"] == "epoch") {
      ++epochs;
      EXPECT_TRUE(record.contains("test_accuracy"));
    } else {
      last_loss = record["loss"];
    }
  }
  EXPECT_EQ(epochs, 2);
  EXPECT_LT(last_loss, first_loss / 2);

  std::ifstream summary_file(result->summary_path);
  auto summary = nlohmann::json::parse(summary_file);
  EXPECT_EQ(summary["strategy"], "local");
  EXPECT_TRUE(summary["manifest"].contains("git_commit"));
  // gradsync's own flags only (those defined in its folders), none of
  // Abseil's.
  const auto& flags = summary["manifest"]["flags"];
  EXPECT_FALSE(flags.contains("flagfile")) << flags.dump();
  EXPECT_FALSE(flags.contains("fromenv")) << flags.dump();

  auto checkpoint = ReadCheckpoint(options.checkpoint_path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->epoch, 2);
  EXPECT_EQ(checkpoint->params.size(), 535818u);
}

}  // namespace
}  // namespace gradsync
