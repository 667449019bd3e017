"""Compiler flags shared by every kvshard target."""

# C library code: strict C11 with every warning an error.
KVS_COPTS = [
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-D_POSIX_C_SOURCE=200809L",
]

# GoogleTest files (C++17).
KVS_TEST_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-missing-field-initializers",
]
