"""Generates C++ Protobuf and gRPC code with the system protoc (Debian's packages).

Bazel 4.2.3's proto rules would fetch protobuf from the network, so the
generated files come from a genrule and are wrapped in a cc_library.
"""

def grpc_cc_proto_library(name, src, deps = [], visibility = None):
    base = src[:-len(".proto")]
    outs = [
        base + ".pb.h",
        base + ".pb.cc",
        base + ".grpc.pb.h",
        base + ".grpc.pb.cc",
    ]
    native.genrule(
        name = name + "_gen",
        srcs = [src],
        outs = outs,
        cmd = " ".join([
            "protoc",
            "--proto_path=.",
            "--cpp_out=$(GENDIR)",
            "--grpc_out=$(GENDIR)",
            "--plugin=protoc-gen-grpc=$$(which grpc_cpp_plugin)",
            "$(location " + src + ")",
        ]),
    )
    native.cc_library(
        name = name,
        srcs = [base + ".pb.cc", base + ".grpc.pb.cc"],
        hdrs = [base + ".pb.h", base + ".grpc.pb.h"],
        deps = deps + ["//third_party:grpc", "//third_party:protobuf"],
        visibility = visibility,
    )
