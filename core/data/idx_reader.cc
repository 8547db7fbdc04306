// IDX reader. zlib's gz* functions read gzip and plain files alike (a file
// without the gzip magic is passed through unchanged), so one code path serves
// both and the file name's extension does not matter.
#include "core/data/idx_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/activity_deadline.h"
#include "core/base/status_macros.h"

namespace gradsync {
namespace {

// The largest array we agree to load: 2^31 bytes (2 GiB). Real IDX data sets
// are far smaller (Fashion-MNIST's training images are 47 MB); the cap turns a
// corrupt or hostile header into an error instead of a huge allocation.
constexpr int64_t kMaxElements = int64_t{1} << 31;

// The only element type gradsync needs: every MNIST-format file is 0x08.
constexpr int kUnsignedByteType = 0x08;

// Memory grows in steps of this size while reading, so a header that declares
// more data than the file holds costs no more memory than the file itself.
constexpr int64_t kReadChunk = int64_t{1} << 20;

const char* IdxTypeName(int type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "unknown";
  }
}

std::string ErrnoText(int error) {
  // strerror is not guaranteed thread-safe; the GNU strerror_r may return a
  // static string instead of filling the buffer, so use its return value.
  char buffer[256];
  buffer[0] = '\0';
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
  return strerror_r(error, buffer, sizeof(buffer));
#else
  strerror_r(error, buffer, sizeof(buffer));
  return buffer;
#endif
}

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to `length` bytes; returns how many were read (fewer only at the end
// of the data) or an error naming `path` for I/O or decompression failures.
absl::StatusOr<int64_t> ReadUpTo(gzFile file, const std::string& path,
                                 uint8_t* out, int64_t length) {
  int64_t total = 0;
  while (total < length) {
    const unsigned request =
        static_cast<unsigned>(std::min<int64_t>(length - total, kReadChunk));
    const int got = gzread(file, out + total, request);
    if (got < 0) {
      int zlib_error = 0;
      const char* message = gzerror(file, &zlib_error);
      if (zlib_error == Z_ERRNO) {
        return absl::DataLossError(
            absl::StrCat(path, ": read failed: ", ErrnoText(errno)));
      }
      return absl::DataLossError(
          absl::StrCat(path, ": corrupt gzip stream: ", message));
    }
    if (got == 0) break;
    total += got;
  }
  return total;
}

// gzread treats a gzip stream that ends early as a normal end of data and only
// records Z_BUF_ERROR; this turns that record into a note for the message.
std::string GzipTruncationNote(gzFile file) {
  int zlib_error = Z_OK;
  gzerror(file, &zlib_error);
  if (zlib_error == Z_BUF_ERROR)
    return " (the gzip stream itself is truncated)";
  return "";
}

uint32_t BigEndian32(const uint8_t* bytes) {
  return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) |
         (uint32_t{bytes[2]} << 8) | uint32_t{bytes[3]};
}

absl::StatusOr<GzFile> OpenForReading(const std::string& path) {
  // open(2) rather than gzopen so that errno reliably describes a failure.
  // A FIFO or a hung mount blocks here or in the reads: a deadline watching
  // the loading names the file (core/base/activity_deadline.h).
  NoteBlockingOn(absl::StrCat("reading ", path));
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const std::string message =
        absl::StrCat("cannot open ", path, ": ", ErrnoText(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::UnavailableError(message);
  }
  struct stat info;
  if (fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path, ": it is a directory"));
  }
  gzFile file = gzdopen(fd, "rb");
  if (file == nullptr) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot open ", path, ": zlib could not allocate a reader"));
  }
  return GzFile(file);
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path) {
  ASSIGN_OR_RETURN(GzFile file, OpenForReading(path));

  // Magic: two zero bytes, the element type, the number of dimensions.
  uint8_t magic[4];
  ASSIGN_OR_RETURN(int64_t got, ReadUpTo(file.get(), path, magic, 4));
  if (got < 4) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated header: ", got,
                     " bytes, an IDX file starts with a 4-byte magic number"));
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: not an IDX file: magic number starts with 0x%02x%02x, expected "
        "0x0000",
        path, magic[0], magic[1]));
  }
  const int type = magic[2];
  if (type != kUnsignedByteType) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: IDX element type 0x%02x (%s) is not supported; only 0x08 "
        "(unsigned byte) is",
        path, type, IdxTypeName(type)));
  }
  const int num_dims = magic[3];
  if (num_dims < 1 || num_dims > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": IDX header declares ", num_dims,
                     " dimensions; expected 1 to 4"));
  }

  uint8_t dim_bytes[16];
  ASSIGN_OR_RETURN(got, ReadUpTo(file.get(), path, dim_bytes, 4 * num_dims));
  if (got < 4 * num_dims) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated header: ", num_dims, " dimensions need ",
        4 * num_dims, " bytes of sizes, file has ", got));
  }
  IdxArray array;
  int64_t elements = 1;
  for (int d = 0; d < num_dims; ++d) {
    const int64_t size = BigEndian32(dim_bytes + 4 * d);
    array.dims.push_back(size);
    if (size < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": dimension ", d, " has size 0; every size must be >= 1"));
    }
    // Each size is < 2^32 and `elements` stays <= 2^31 here, so the product
    // fits in int64 and the check cannot be fooled by overflow.
    elements *= size;
    if (elements > kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": IDX header declares dimensions [",
          absl::StrJoin(array.dims, ", "), d + 1 < num_dims ? ", ...]" : "]",
          ", more than the limit of ", kMaxElements, " elements"));
    }
  }

  // Grow the buffer as data arrives instead of trusting the header's size.
  array.data.reserve(static_cast<size_t>(std::min(elements, kReadChunk)));
  int64_t have = 0;
  while (have < elements) {
    const int64_t want = std::min(elements - have, kReadChunk);
    array.data.resize(static_cast<size_t>(have + want));
    ASSIGN_OR_RETURN(
        got, ReadUpTo(file.get(), path, array.data.data() + have, want));
    have += got;
    if (got < want) break;
  }
  if (have < elements) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated: header declares ", elements,
        " bytes of data, file has ", have, GzipTruncationNote(file.get())));
  }
  uint8_t extra[256];
  ASSIGN_OR_RETURN(got, ReadUpTo(file.get(), path, extra, sizeof(extra)));
  if (got > 0) {
    // Count the rest so the message tells how much is there.
    int64_t trailing = got;
    while (got == static_cast<int64_t>(sizeof(extra))) {
      ASSIGN_OR_RETURN(got, ReadUpTo(file.get(), path, extra, sizeof(extra)));
      trailing += got;
    }
    return absl::DataLossError(
        absl::StrCat(path, ": ", trailing, " trailing bytes after the ",
                     elements, " bytes of data the header declares"));
  }
  // gzread reports a gzip stream cut short (even one missing only its CRC
  // trailer) as a plain end of data; a complete array does not excuse it.
  if (!GzipTruncationNote(file.get()).empty()) {
    return absl::DataLossError(absl::StrCat(
        path,
        ": the gzip stream is truncated after the data (its CRC trailer "
        "is missing or cut)"));
  }
  return array;
}

}  // namespace gradsync
