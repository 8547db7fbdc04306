#include "core/checkpoint.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "core/metrics.h"
#include "zlib.h"

namespace gradsync {
namespace {

constexpr char kMagic[8] = {'G', 'S', 'C', 'K', 'P', 'T', '0', '1'};
// Refuse absurd declared sizes before allocating (a corrupt header).
constexpr uint64_t kMaxFloats = uint64_t{1} << 32;

void PutU64(std::string& out, uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void PutFloats(std::string& out, const std::vector<float>& v) {
  PutU64(out, v.size());
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

class Reader {
 public:
  Reader(const std::string& data, const std::string& path) : data_(data), path_(path) {}
  absl::Status U64(uint64_t* v) {
    if (data_.size() - pos_ < sizeof(*v)) return Truncated();
    std::memcpy(v, data_.data() + pos_, sizeof(*v));
    pos_ += sizeof(*v);
    return absl::OkStatus();
  }
  absl::Status Floats(std::vector<float>* v) {
    uint64_t n = 0;
    absl::Status s = U64(&n);
    if (!s.ok()) return s;
    if (n > kMaxFloats || (data_.size() - pos_) / sizeof(float) < n) return Truncated();
    v->resize(n);
    std::memcpy(v->data(), data_.data() + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
    return absl::OkStatus();
  }
  absl::Status Bytes(std::string* s, uint64_t n) {
    if (data_.size() - pos_ < n) return Truncated();
    s->assign(data_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  size_t remaining() const { return data_.size() - pos_; }

 private:
  absl::Status Truncated() const {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path_, " is truncated or corrupt at byte ", pos_));
  }
  const std::string& data_;
  const std::string& path_;
  size_t pos_ = 0;
};

#define GS_CHECKPOINT_READ(expr)          \
  do {                                    \
    absl::Status s_ = (expr);             \
    if (!s_.ok()) return s_;              \
  } while (0)

}  // namespace

absl::Status WriteCheckpoint(const std::string& path, const Checkpoint& c) {
  std::string out(kMagic, sizeof(kMagic));
  PutU64(out, c.model.size());
  out += c.model;
  PutU64(out, c.epoch);
  PutU64(out, c.step);
  PutU64(out, c.optimizer_step);
  PutFloats(out, c.params);
  PutU64(out, c.optimizer_state.size());
  for (const auto& state : c.optimizer_state) PutFloats(out, state);
  const uint32_t crc = crc32(0L, reinterpret_cast<const Bytef*>(out.data()), out.size());
  PutU64(out, crc);
  return WriteFileAtomically(path, out);
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open checkpoint ", path));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < sizeof(kMagic) + 8 ||
      std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(path, " is not a gradsync checkpoint (bad magic)"));
  }
  uint64_t stored_crc = 0;
  std::memcpy(&stored_crc, data.data() + data.size() - 8, 8);
  const uint32_t crc = crc32(0L, reinterpret_cast<const Bytef*>(data.data()), data.size() - 8);
  if (stored_crc != crc) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is corrupt: CRC-32 mismatch (stored ", stored_crc,
        ", computed ", crc, ")"));
  }
  const std::string body = data.substr(sizeof(kMagic), data.size() - sizeof(kMagic) - 8);
  Reader reader(body, path);
  Checkpoint c;
  uint64_t n = 0, v = 0;
  GS_CHECKPOINT_READ(reader.U64(&n));
  GS_CHECKPOINT_READ(reader.Bytes(&c.model, n));
  GS_CHECKPOINT_READ(reader.U64(&v));
  c.epoch = static_cast<int64_t>(v);
  GS_CHECKPOINT_READ(reader.U64(&v));
  c.step = static_cast<int64_t>(v);
  GS_CHECKPOINT_READ(reader.U64(&v));
  c.optimizer_step = static_cast<int64_t>(v);
  GS_CHECKPOINT_READ(reader.Floats(&c.params));
  GS_CHECKPOINT_READ(reader.U64(&n));
  if (n > 16) return absl::DataLossError(absl::StrCat("checkpoint ", path, " declares ", n, " optimizer buffers"));
  c.optimizer_state.resize(n);
  for (auto& state : c.optimizer_state) GS_CHECKPOINT_READ(reader.Floats(&state));
  if (reader.remaining() != 0) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " has ",
                                            reader.remaining(), " unexpected trailing bytes"));
  }
  return c;
}

}  // namespace gradsync
