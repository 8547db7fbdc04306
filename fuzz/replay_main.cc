// A main() for a libFuzzer target built without libFuzzer (with GCC, under
// Bazel): runs the target on every file of the folders given as arguments,
// then on a fixed number of pseudo-random inputs from a fixed seed. It keeps
// the fuzz targets compiling with the code they test, replays the seeds and
// anything a fuzzing run found, and does so under --config=asan too.
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc,
                                                          char*** argv);

namespace {

int RunFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  return LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                                bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    DIR* dir = opendir(argv[i]);
    if (dir == nullptr) {
      RunFile(argv[i]);
      ++files;
      continue;
    }
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      RunFile(std::string(argv[i]) + "/" + entry->d_name);
      ++files;
    }
    closedir(dir);
  }
  std::mt19937 random(20261122);
  constexpr int kRandomInputs = 3000;
  std::vector<uint8_t> input;
  for (int i = 0; i < kRandomInputs; ++i) {
    input.resize(random() % 4096);
    for (uint8_t& byte : input) byte = static_cast<uint8_t>(random());
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::printf("replayed %d files and %d random inputs\n", files, kRandomInputs);
  return 0;
}
