"""Compiler flags shared by every kvshard target."""

# C library code: strict C11 with every warning an error, and every symbol
# hidden unless kvshard.h marks it KVS_API: the shared library exports the
# engine's API and nothing of its inside.
KVS_COPTS = [
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-D_POSIX_C_SOURCE=200809L",
    "-fvisibility=hidden",
]

# GoogleTest files (C++17).
KVS_TEST_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-missing-field-initializers",
]
