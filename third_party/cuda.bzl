"""Selects shared by the packages that hold CUDA code (--config=cuda)."""

# Targets that exist only in CUDA builds: elsewhere Bazel skips them, so
# `bazel build //...` needs no nvcc.
CUDA_ONLY = select({
    "//:cuda_enabled": [],
    "//conditions:default": ["@platforms//:incompatible"],
})

# Tells a source file that the CUDA backend is linked in.
CUDA_DEFINES = select({
    "//:cuda_enabled": ["GRADSYNC_CUDA=1"],
    "//conditions:default": [],
})
