// The checkpoint file format (checkpoint.h): writing, and reading with every
// check a damaged file can fail named in its error.
#include "core/optim/checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "core/base/files.h"
#include "core/telemetry/metrics.h"
#include "zlib.h"

namespace gradsync {
namespace {

// The last two characters are the format version: 4 is written; 3 (the same
// without the compression) and 2 (without the model's buffers either) are
// still read.
constexpr char kMagicPrefix[6] = {'G', 'S', 'C', 'K', 'P', 'T'};
constexpr char kVersion[2] = {'0', '4'};
constexpr char kVersionWithoutCompression[2] = {'0', '3'};
constexpr char kVersionWithoutBuffers[2] = {'0', '2'};
constexpr size_t kMagicSize = sizeof(kMagicPrefix) + sizeof(kVersion);
// Magic, declared size, ..., CRC.
constexpr size_t kMinSize = kMagicSize + 8 + 8;
// Refuse absurd declared sizes before allocating (a corrupt header).
constexpr uint64_t kMaxFloats = uint64_t{1} << 32;
constexpr uint64_t kMaxBuffers = 16;

void PutU64(std::string& out, uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void PutString(std::string& out, const std::string& s) {
  PutU64(out, s.size());
  out += s;
}
void PutFloats(std::string& out, const std::vector<float>& v) {
  PutU64(out, v.size());
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Reads the body. The CRC has already matched, so a failure here means a
// file written by a broken writer, not a damaged disk; the message still
// says where.
class Reader {
 public:
  Reader(const std::string& data, size_t begin, size_t end,
         const std::string& path)
      : data_(data), pos_(begin), end_(end), path_(path) {}
  absl::Status U64(uint64_t* v) {
    if (end_ - pos_ < sizeof(*v)) return Malformed("a field runs past the end");
    std::memcpy(v, data_.data() + pos_, sizeof(*v));
    pos_ += sizeof(*v);
    return absl::OkStatus();
  }
  absl::Status I64(int64_t* v) {
    uint64_t u = 0;
    absl::Status s = U64(&u);
    *v = static_cast<int64_t>(u);
    return s;
  }
  absl::Status String(std::string* s) {
    uint64_t n = 0;
    absl::Status status = U64(&n);
    if (!status.ok()) return status;
    if (end_ - pos_ < n) return Malformed("a string runs past the end");
    s->assign(data_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  absl::Status Floats(std::vector<float>* v) {
    uint64_t n = 0;
    absl::Status s = U64(&n);
    if (!s.ok()) return s;
    if (n > kMaxFloats || (end_ - pos_) / sizeof(float) < n) {
      return Malformed(
          absl::StrCat("an array of ", n, " floats runs past the end"));
    }
    v->resize(n);
    // An empty vector's data() may be null, which memcpy must not get even
    // for 0 bytes (a model without buffers writes an empty array).
    if (n > 0) std::memcpy(v->data(), data_.data() + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
    return absl::OkStatus();
  }
  size_t remaining() const { return end_ - pos_; }
  absl::Status Malformed(const std::string& what) const {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path_, " is malformed at byte ", pos_, ": ", what));
  }

 private:
  const std::string& data_;
  size_t pos_;
  const size_t end_;
  const std::string& path_;
};

#define GS_CHECKPOINT_READ(expr) \
  do {                           \
    absl::Status s_ = (expr);    \
    if (!s_.ok()) return s_;     \
  } while (0)

}  // namespace

absl::Status WriteCheckpoint(const std::string& path, const Checkpoint& c) {
  std::string out(kMagicPrefix, sizeof(kMagicPrefix));
  out.append(kVersion, sizeof(kVersion));
  PutU64(out, 0);  // the total size, filled in below
  PutString(out, c.model);
  PutU64(out, c.step);
  PutU64(out, c.epoch);
  PutU64(out, c.epoch_step);
  PutU64(out, c.seed);
  PutU64(out, c.world_size);
  PutU64(out, c.batch_size);
  PutString(out, c.optimizer);
  PutU64(out, c.optimizer_on_servers ? 1 : 0);
  PutU64(out, c.optimizer_step);
  PutFloats(out, c.params);
  PutU64(out, c.optimizer_state.size());
  for (const auto& state : c.optimizer_state) PutFloats(out, state);
  PutU64(out, c.keys.size());
  for (const CheckpointKey& key : c.keys) {
    PutU64(out, key.key);
    PutU64(out, key.numel);
  }
  PutFloats(out, c.buffers);
  PutString(out, c.compression);
  const uint64_t total = out.size() + 8;
  std::memcpy(&out[kMagicSize], &total, sizeof(total));
  const uint32_t crc =
      crc32(0L, reinterpret_cast<const Bytef*>(out.data()), out.size());
  PutU64(out, crc);
  return WriteFileAtomically(path, out);
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  // A directory opens as a stream and then throws from its first read
  // (std::ios_failure, uncaught in a gRPC thread or the trainer).
  struct stat info;
  if (stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path,
        S_ISDIR(info.st_mode) ? " is a directory" : " is not a regular file",
        "; --checkpoint names a file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("checkpoint ", path, " does not exist"));
    }
    return absl::DataLossError(absl::StrCat("cannot open checkpoint ", path,
                                            ": ", std::strerror(error)));
  }
  const std::string data((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  if (data.size() < kMagicSize ||
      std::memcmp(data.data(), kMagicPrefix, sizeof(kMagicPrefix)) != 0) {
    return absl::DataLossError(
        absl::StrCat(path, " is not a gradsync checkpoint (bad magic)"));
  }
  const std::string version =
      data.substr(sizeof(kMagicPrefix), sizeof(kVersion));
  int format_version = 0;
  if (version == std::string(kVersion, sizeof(kVersion))) {
    format_version = 4;
  } else if (version == std::string(kVersionWithoutCompression,
                                    sizeof(kVersionWithoutCompression))) {
    format_version = 3;
  } else if (version == std::string(kVersionWithoutBuffers,
                                    sizeof(kVersionWithoutBuffers))) {
    format_version = 2;
  } else {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " has format version ", version,
                     "; this build reads versions 02 to ",
                     std::string(kVersion, sizeof(kVersion))));
  }
  // The declared size first: a file cut short (a copy that did not finish,
  // a full disk outside our atomic write) is told apart from flipped bits.
  uint64_t declared = 0;
  if (data.size() >= kMagicSize + 8)
    std::memcpy(&declared, data.data() + kMagicSize, 8);
  if (data.size() < kMinSize || declared < kMinSize || data.size() < declared) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is truncated: ", data.size(), " bytes",
        declared >= kMinSize
            ? absl::StrCat(" of the ", declared, " it declares")
            : ""));
  }
  if (data.size() > declared) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " has ", data.size() - declared,
                     " bytes beyond the ", declared, " it declares"));
  }
  uint64_t stored_crc = 0;
  std::memcpy(&stored_crc, data.data() + data.size() - 8, 8);
  const uint32_t crc =
      crc32(0L, reinterpret_cast<const Bytef*>(data.data()), data.size() - 8);
  if (stored_crc != crc) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is corrupt: CRC-32 mismatch (stored ",
        stored_crc, ", computed ", crc, ")"));
  }
  Reader reader(data, kMagicSize + 8, data.size() - 8, path);
  Checkpoint c;
  uint64_t n = 0, v = 0;
  GS_CHECKPOINT_READ(reader.String(&c.model));
  GS_CHECKPOINT_READ(reader.I64(&c.step));
  GS_CHECKPOINT_READ(reader.I64(&c.epoch));
  GS_CHECKPOINT_READ(reader.I64(&c.epoch_step));
  GS_CHECKPOINT_READ(reader.U64(&c.seed));
  GS_CHECKPOINT_READ(reader.I64(&c.world_size));
  GS_CHECKPOINT_READ(reader.I64(&c.batch_size));
  GS_CHECKPOINT_READ(reader.String(&c.optimizer));
  GS_CHECKPOINT_READ(reader.U64(&v));
  c.optimizer_on_servers = v != 0;
  GS_CHECKPOINT_READ(reader.I64(&c.optimizer_step));
  GS_CHECKPOINT_READ(reader.Floats(&c.params));
  GS_CHECKPOINT_READ(reader.U64(&n));
  if (n > kMaxBuffers)
    return reader.Malformed(absl::StrCat(n, " optimizer buffers"));
  c.optimizer_state.resize(n);
  for (auto& state : c.optimizer_state) {
    GS_CHECKPOINT_READ(reader.Floats(&state));
    if (state.size() != c.params.size()) {
      return reader.Malformed(absl::StrCat("an optimizer buffer of ",
                                           state.size(), " floats for ",
                                           c.params.size(), " parameters"));
    }
  }
  GS_CHECKPOINT_READ(reader.U64(&n));
  if (n > reader.remaining() / 16)
    return reader.Malformed(absl::StrCat(n, " keys"));
  c.keys.resize(n);
  for (CheckpointKey& key : c.keys) {
    GS_CHECKPOINT_READ(reader.I64(&key.key));
    GS_CHECKPOINT_READ(reader.I64(&key.numel));
  }
  c.format_version = format_version;
  if (format_version >= 3) GS_CHECKPOINT_READ(reader.Floats(&c.buffers));
  if (format_version >= 4) GS_CHECKPOINT_READ(reader.String(&c.compression));
  if (reader.remaining() != 0) {
    return reader.Malformed(
        absl::StrCat(reader.remaining(), " unexpected trailing bytes"));
  }
  return c;
}

}  // namespace gradsync
