// The PS's derived settings: the key-size rule puts every server within 10 %
// of its share on the models users run (the MLP, ResNet-18, a 2.5 MB gradient
// in 32 tensors) at K = 1, 2, 4, 8, with balanced shares too; the window rule
// gives the measured 32 KiB at 100 Mbit/s and grows with latency; explicit
// values win; the imbalance warning names the fix. (How the link is read from
// the launcher's environment: tools/emulated_link_test.cc.)
#include "ps/settings.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/key_size_rule.h"
#include "ps/client/partitioner.h"
#include "ps/stream_window_rule.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

ParamLayout Layout(const std::vector<ParamSpec>& specs) {
  absl::StatusOr<ParamLayout> layout =
      ParamLayout::Create(specs, int64_t{25} << 20);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

// The default MLP, 784-512-256-10 (core/model/model.h).
std::vector<ParamSpec> MlpSpecs() {
  return {{"fc0.weight", {512, 784}}, {"fc0.bias", {512}},
          {"fc1.weight", {256, 512}}, {"fc1.bias", {256}},
          {"fc2.weight", {10, 256}},  {"fc2.bias", {10}}};
}

// ResNet-18 for 32x32 images (3x3 stem, core/model/resnet.cc): 11.17 M floats.
std::vector<ParamSpec> ResNet18Specs() {
  std::vector<ParamSpec> specs;
  auto conv = [&specs](const std::string& name, int64_t out, int64_t in,
                       int64_t k) {
    specs.push_back({name + ".weight", {out, in, k, k}});
  };
  auto norm = [&specs](const std::string& name, int64_t c) {
    specs.push_back({name + ".weight", {c}});
    specs.push_back({name + ".bias", {c}});
  };
  conv("conv1", 64, 3, 3);
  norm("bn1", 64);
  int64_t in = 64;
  const int64_t widths[] = {64, 128, 256, 512};
  for (int layer = 0; layer < 4; ++layer) {
    for (int block = 0; block < 2; ++block) {
      const std::string name =
          "layer" + std::to_string(layer + 1) + "." + std::to_string(block);
      const int64_t out = widths[layer];
      conv(name + ".conv1", out, in, 3);
      norm(name + ".bn1", out);
      conv(name + ".conv2", out, out, 3);
      norm(name + ".bn2", out);
      if (in != out) {
        conv(name + ".downsample", out, in, 1);
        norm(name + ".downsample_bn", out);
      }
      in = out;
    }
  }
  specs.push_back({"fc.weight", {10, 512}});
  specs.push_back({"fc.bias", {10}});
  return specs;
}

// --model=custom --custom_params=625000 --custom_tensors=32 (2.5 MB).
std::vector<ParamSpec> CustomSpecs(int64_t params, int tensors) {
  std::vector<ParamSpec> specs;
  for (int t = 0; t < tensors; ++t) {
    specs.push_back({"tensor" + std::to_string(t) + ".weight",
                     {params / tensors + (t < params % tensors ? 1 : 0)}});
  }
  return specs;
}

TEST(KeySizeRuleTest, EveryServerWithinTenPercentOnTheModelsUsersRun) {
  const struct {
    const char* name;
    std::vector<ParamSpec> specs;
  } models[] = {{"mlp", MlpSpecs()},
                {"resnet18", ResNet18Specs()},
                {"custom 2.5 MB / 32", CustomSpecs(625000, 32)}};
  for (const auto& model : models) {
    const ParamLayout layout = Layout(model.specs);
    for (int k : {1, 2, 4, 8}) {
      for (int n : {k, 8}) {
        const std::vector<double> shares(k, 1.0 / k);
        absl::StatusOr<KeySizeChoice> choice = ChooseKeySize(layout, shares, n);
        ASSERT_TRUE(choice.ok()) << choice.status();
        // The partition a worker builds with that key size, measured on its
        // own.
        absl::StatusOr<Partition> partition =
            Partition::Create(layout, k, choice->key_bytes);
        ASSERT_TRUE(partition.ok()) << partition.status();
        EXPECT_LE(partition->imbalance(), 1.10)
            << model.name << " K=" << k << ": " << partition->Describe();
        EXPECT_NEAR(choice->imbalance, partition->imbalance(), 1e-9);
        EXPECT_GE(choice->key_bytes, kMinKeyBytes) << model.name << " K=" << k;
        EXPECT_LE(choice->key_bytes, kMaxKeyBytes) << model.name << " K=" << k;
        EXPECT_THAT(choice->reason, HasSubstr("auto: "));
      }
    }
  }
}

TEST(KeySizeRuleTest, TheHeadlineGradientGetsTheMeasuredKeySize) {
  // 2.5 MB over 8 servers, N = 8: 312 KB through each link, a tenth of it
  // is under the 64 KiB floor, the size measured to reach the α–β model.
  const ParamLayout layout = Layout(CustomSpecs(625000, 32));
  absl::StatusOr<KeySizeChoice> choice =
      ChooseKeySize(layout, std::vector<double>(8, 1.0 / 8), 8);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->key_bytes, 64 << 10);
}

TEST(KeySizeRuleTest, TheTailStaysATenthOfTheBusiestLink) {
  // 10 MB over K = N = 8: 1.25 MB through each link; the last key leaves
  // its server 8 times, so keys of at most 125 KB: 64 KiB (not 256).
  const ParamLayout layout = Layout(CustomSpecs(2500000, 32));
  absl::StatusOr<KeySizeChoice> eight =
      ChooseKeySize(layout, std::vector<double>(8, 1.0 / 8), 8);
  ASSERT_TRUE(eight.ok());
  EXPECT_EQ(eight->key_bytes, 64 << 10);
  // Tail 8 x 64 KiB against the link's 8 x 1.25 MB.
  EXPECT_LE(8.0 * eight->key_bytes, 0.1 * 10e6);
  // One server takes N·S = 8 x 10 MB; its tail, 8 keys, a tenth of that:
  // 1 MB keys, rounded down to a power of two.
  absl::StatusOr<KeySizeChoice> one =
      ChooseKeySize(layout, std::vector<double>(1, 1.0), 8);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->key_bytes, 512 << 10);
}

TEST(KeySizeRuleTest, KeysStayAsLargeAsBalanceAllows) {
  // The MLP on 8 servers: 32 KiB keys leave one server 1.1008x its share,
  // so the rule goes below 32 KiB, but not by halving to 16.
  const ParamLayout layout = Layout(MlpSpecs());
  absl::StatusOr<KeySizeChoice> choice =
      ChooseKeySize(layout, std::vector<double>(8, 1.0 / 8), 8);
  ASSERT_TRUE(choice.ok());
  EXPECT_GT(choice->key_bytes, 16 << 10);
  EXPECT_EQ(choice->key_bytes % 4096, 0);
}

TEST(KeySizeRuleTest, TheOldFixedDefaultWasUnbalancedOnTheMlp) {
  // What the rule fixes: 4 MiB keys are whole tensors of the MLP.
  const ParamLayout layout = Layout(MlpSpecs());
  absl::StatusOr<Partition> old = Partition::Create(layout, 8, 4 << 20);
  ASSERT_TRUE(old.ok());
  EXPECT_GT(old->imbalance(), 5.0);
}

TEST(KeySizeRuleTest, BalancedSharesAreMetAgainstTheirTargets) {
  // 2 serving workers beside 2 separate servers, N = 4 (shares 0.1 / 0.4
  // ... as ServerShares gives them).
  const ParamLayout layout = Layout(CustomSpecs(625000, 32));
  absl::StatusOr<std::vector<double>> shares =
      ServerShares(PartitionPolicy::kBalanced, 4, 2, 2);
  ASSERT_TRUE(shares.ok());
  absl::StatusOr<KeySizeChoice> choice = ChooseKeySize(layout, *shares, 4);
  ASSERT_TRUE(choice.ok());
  absl::StatusOr<Partition> partition =
      Partition::Create(layout, *shares, choice->key_bytes);
  ASSERT_TRUE(partition.ok());
  EXPECT_LE(ImbalanceAgainstTargets(partition->server_bytes(), *shares), 1.10)
      << partition->Describe();
}

TEST(KeySizeRuleTest, NoServersIsRefused) {
  const ParamLayout layout = Layout(MlpSpecs());
  EXPECT_FALSE(ChooseKeySize(layout, {}, 4).ok());
}

LinkFigures Link(double mbit, double rtt_ms) {
  LinkFigures link;
  link.rate_bytes_per_s = mbit * 1e6 / 8;
  link.round_trip_s = rtt_ms / 1e3;
  link.description = "test link";
  return link;
}

TEST(StreamWindowRuleTest, TheMeasuredWindowAtOneHundredMegabits) {
  EXPECT_EQ(ChooseStreamWindow(Link(100, 0), 8).window_bytes, 32 << 10);
  EXPECT_EQ(ChooseStreamWindow(Link(100, 0), 1).window_bytes, 32 << 10);
  EXPECT_EQ(ChooseStreamWindow(Link(1000, 0.4), 8).window_bytes, 32 << 10);
}

TEST(StreamWindowRuleTest, LatencyGrowsTheWindowSoNoStreamIsCapped) {
  // 1 Gbit/s, 1 ms one way (2 ms round trip): 8 streams share 250 KB in
  // flight; each needs 31 KB, twice that is 62.5 KB -> 64 KiB.
  const StreamWindowChoice eight = ChooseStreamWindow(Link(1000, 2), 8);
  EXPECT_EQ(eight.window_bytes, 64 << 10);
  // One stream alone must carry the whole rate: window / RTT >= rate.
  const StreamWindowChoice one = ChooseStreamWindow(Link(1000, 2), 1);
  EXPECT_GE(one.window_bytes / 2e-3, 1000e6 / 8);
  EXPECT_EQ(one.window_bytes, 512 << 10);
  EXPECT_LE(ChooseStreamWindow(Link(100000, 100), 1).window_bytes,
            kMaxAutoStreamWindowBytes);
  EXPECT_THAT(eight.reason, HasSubstr("auto: "));
}

TEST(StreamWindowRuleTest, AnUnknownLinkKeepsTheFixedWindow) {
  const StreamWindowChoice choice = ChooseStreamWindow(LinkFigures{}, 8);
  EXPECT_EQ(choice.window_bytes, kUnknownLinkStreamWindowBytes);
  EXPECT_FALSE(choice.bdp_probe);
  EXPECT_THAT(choice.reason, HasSubstr("not known"));
}

TEST(StreamWindowRuleTest, ProbesWhereAStreamOutgrowsTheConnectionWindow) {
  // A stream's share (2 x rate/fan-in x RTT) fits in a connection's fixed
  // 65535-byte window: the fixed, equal windows stay.
  const StreamWindowChoice near = ChooseStreamWindow(Link(100, 0), 8);
  EXPECT_FALSE(near.bdp_probe);
  EXPECT_THAT(near.reason, HasSubstr("BDP probing off"));
  EXPECT_FALSE(ChooseStreamWindow(Link(1000, 0.4), 8).bdp_probe);  // 12.5 KB
  EXPECT_FALSE(ChooseStreamWindow(Link(1000, 2), 8).bdp_probe);    // 62.5 KB
  // 1 Gbit/s, 10 ms round trip, fan-in 2: 1.25 MB, twenty times the fixed
  // window (the measured 104 ms -> 17 ms case).
  const StreamWindowChoice far = ChooseStreamWindow(Link(1000, 10), 2);
  EXPECT_TRUE(far.bdp_probe);
  EXPECT_THAT(far.reason, HasSubstr("BDP probing on"));
  EXPECT_TRUE(ChooseStreamWindow(Link(1000, 10), 8).bdp_probe);  // 312 KB
  EXPECT_TRUE(ChooseStreamWindow(Link(1000, 2), 4).bdp_probe);   // 125 KB
  // The boundary, one stream: 2 x rate x RTT just over and just under.
  EXPECT_TRUE(ChooseStreamWindow(Link(1000, 0.27), 1).bdp_probe);   // 67.5 KB
  EXPECT_FALSE(ChooseStreamWindow(Link(1000, 0.26), 1).bdp_probe);  // 65 KB
}

// A stream has max(window, message) in flight (gRPC announces the unread
// rest of a message its reader waits for), so messages follow the window:
// the fixed small windows of short round trips get the measured floor, an
// unknown link (4 MiB windows) the old 1 MiB.
TEST(MessageSizeRuleTest, MessagesFollowTheWindowWithinTheMeasuredBounds) {
  EXPECT_EQ(ChooseMessageSize(32 << 10).message_bytes, kMinAutoMessageBytes);
  EXPECT_EQ(ChooseMessageSize(256 << 10).message_bytes, 256 << 10);
  EXPECT_EQ(ChooseMessageSize(kUnknownLinkStreamWindowBytes).message_bytes,
            1 << 20);
  // 1 Gbit/s, 20 us one way, fan-in 4: the 32 KiB window, 128 KiB messages.
  const ResolvedStreamWindow near =
      ResolveStreamWindow(0, Link(1000, 0.04), 4);
  ASSERT_EQ(near.bytes, 32 << 10);
  const ResolvedSetting message = ResolveMessageSize(0, near);
  EXPECT_EQ(message.bytes, 128 << 10);
  EXPECT_THAT(message.source, HasSubstr("auto: "));
  // An explicit size wins whatever the window.
  EXPECT_EQ(ResolveMessageSize(64 << 10, near).bytes, 64 << 10);
  EXPECT_EQ(ResolveMessageSize(64 << 10, near).source, "flag");
}

TEST(TuningTest, AnExplicitValueAlwaysWins) {
  const ParamLayout layout = Layout(MlpSpecs());
  absl::StatusOr<ResolvedSetting> key =
      ResolveKeySize(4 << 20, layout, std::vector<double>(8, 1.0 / 8), 8);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->bytes, 4 << 20);
  EXPECT_EQ(key->source, "flag");
  const ResolvedStreamWindow window =
      ResolveStreamWindow(4 << 20, Link(100, 0), 8);
  EXPECT_EQ(window.bytes, 4 << 20);
  EXPECT_EQ(window.source, "flag");
  // An explicit window is a fixed window, even where the rule would probe.
  const ResolvedStreamWindow far =
      ResolveStreamWindow(4 << 20, Link(1000, 10), 2);
  EXPECT_FALSE(far.bdp_probe);
  EXPECT_TRUE(ResolveStreamWindow(0, Link(1000, 10), 2).bdp_probe);
  absl::StatusOr<ResolvedSetting> automatic =
      ResolveKeySize(0, layout, std::vector<double>(8, 1.0 / 8), 8);
  ASSERT_TRUE(automatic.ok());
  EXPECT_THAT(automatic->source, HasSubstr("auto: "));
}

TEST(TuningTest, ImbalanceWarningNamesTheKeySizeThatFixesIt) {
  const ParamLayout layout = Layout(MlpSpecs());
  const std::vector<double> shares(8, 1.0 / 8);
  absl::StatusOr<KeySizeChoice> rule = ChooseKeySize(layout, shares, 8);
  ASSERT_TRUE(rule.ok());
  absl::StatusOr<Partition> old = Partition::Create(layout, shares, 4 << 20);
  ASSERT_TRUE(old.ok());
  const std::optional<std::string> warning = ImbalanceWarning(*old, *rule);
  ASSERT_TRUE(warning.has_value());
  EXPECT_THAT(*warning, HasSubstr("server 0 holds"));
  EXPECT_THAT(*warning, HasSubstr(absl::StrCat("--ps_chunk_kb=",
                                               rule->key_bytes / 1024)));
  absl::StatusOr<Partition> fixed =
      Partition::Create(layout, shares, rule->key_bytes);
  ASSERT_TRUE(fixed.ok());
  EXPECT_FALSE(ImbalanceWarning(*fixed, *rule).has_value());
}

// One value fills the start-up lines, the manifest's entries and the
// warnings, with the rules' values and reasons; every worker derives it alone.
TEST(PsSettingsTest, OneValueFillsTheLogTheManifestAndTheWarnings) {
  const ParamLayout layout = Layout(MlpSpecs());
  PsSettingsInputs inputs;
  inputs.num_workers = 4;
  inputs.num_servers = 4;
  inputs.link = Link(100, 0);
  inputs.update_mode = ps::UPDATE_SERVER;
  inputs.consistency.mode = ps::CONSISTENCY_ASP;
  inputs.optimizer.kind = "sgd";
  inputs.optimizer.momentum = 0.9;
  Partition partition;
  absl::StatusOr<PsSettings> settings =
      ResolvePsSettings(inputs, layout, &partition);
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(partition.num_servers(), 4);
  EXPECT_EQ(partition.chunk_bytes(), settings->key_size.bytes);
  EXPECT_THAT(settings->key_size.source, HasSubstr("auto: "));
  EXPECT_EQ(settings->streams.push_window.bytes,
            ResolveStreamWindow(0, inputs.link, 4).bytes);
  const std::vector<std::string> lines = settings->LogLines();
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0], absl::StrCat("ps: key size ",
                                   settings->key_size.bytes / 1024, " KiB (",
                                   settings->key_size.source, ")"));
  EXPECT_THAT(lines[1], HasSubstr("ps: push stream window "));
  EXPECT_THAT(lines[4], HasSubstr("ps: result messages of at most "));
  std::vector<std::string> names;
  for (const PsManifestEntry& entry : settings->ManifestEntries()) {
    names.push_back(entry.name);
  }
  EXPECT_THAT(names, ::testing::ElementsAre(
                         "ps_chunk_kb", "ps_stream_window_kb.push",
                         "ps_stream_window_kb.pull", "ps_message_kb.push",
                         "ps_message_kb.pull"));
  ASSERT_EQ(settings->warnings.size(), 1u);
  EXPECT_THAT(settings->warnings[0], HasSubstr("--ps_consistency=asp"));
  EXPECT_EQ(settings->OptimizerProto().momentum(), 0.9f);
  // An explicit key size wins, and the rule's still names the fix.
  inputs.chunk_bytes = 4 << 20;
  inputs.num_servers = 8;
  inputs.num_workers = 8;
  settings = ResolvePsSettings(inputs, layout, &partition);
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->key_size.source, "flag");
  EXPECT_THAT(settings->warnings[0], HasSubstr("server 0 holds"));
}

}  // namespace
}  // namespace gradsync
