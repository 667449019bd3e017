// Helpers for store tests: scratch directories, keys, deterministic blocks.
#ifndef KVS_TESTS_BLOCKS_STORE_TEST_UTIL_H
#define KVS_TESTS_BLOCKS_STORE_TEST_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "blocks/block_hash.h"
#include "blocks/block_signed.h"
#include "tests/blocks/block_test_util.h"

namespace kvs_test {

// A soak knob from the environment (a decimal count), or `fallback` when
// unset; a value that is not one fails the test and uses the fallback.
inline uint64_t env_u64(const char *name, uint64_t fallback) {
  const char *v = getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char *end = nullptr;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno != 0 || *end != '\0' || *v == '-') {
    ADD_FAILURE() << name << "=" << v << " is not a decimal count; using " << fallback;
    return fallback;
  }
  return n;
}

// A fresh directory under the test's scratch space.
inline std::string scratch_dir(const std::string &tag) {
  const char *base = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/" + tag + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return "";
  return buf.data();
}

inline std::vector<std::string> list_dir(const std::string &dir) {
  std::vector<std::string> names;
  DIR *d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (struct dirent *e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  return names;
}

inline bool file_exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

inline std::vector<uint8_t> read_bytes(const std::string &path) {
  std::vector<uint8_t> out;
  FILE *f = fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  uint8_t buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  fclose(f);
  return out;
}

inline bool write_bytes(const std::string &path, const std::vector<uint8_t> &bytes) {
  FILE *f = fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = bytes.empty() || fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return fclose(f) == 0 && ok;
}

// The chain hash of block `index` of a synthetic sequence.
inline kvs_block_hash key_of(uint64_t index, uint32_t block_size = 4) {
  std::vector<uint32_t> tokens(block_size);
  for (uint32_t i = 0; i < block_size; i++) {
    tokens[i] = static_cast<uint32_t>(index * block_size + i);
  }
  kvs_block_hash h{};
  kvs_block_hash_chain(nullptr, tokens.data(), tokens.size(), block_size, &h, nullptr);
  return h;
}

// The shape of the synthetic blocks a test writes.
struct Shape {
  uint32_t n_layers = 2;
  uint32_t n_kv_heads = 2;
  uint32_t head_dim = 8;
  uint32_t block_size = 4;
  kvs_dtype dtype = KVS_DTYPE_F32;
};

inline kvs_block_signature reader_for(const Shape &s, const char *model = "model-a") {
  return expected(model, flat(s.block_size), s.n_layers, s.n_kv_heads, s.head_dim, s.block_size,
                  s.dtype);
}

// A stamped block whose content is derived from `seed` (nonzero).
inline kvs_block_t make_block(const Shape &s, uint64_t seed, const char *model = "model-a") {
  std::vector<Layer> layers =
      payload(s.n_layers, s.n_kv_heads, s.head_dim, s.block_size, s.dtype, seed);
  std::vector<kvs_block_layer> v = views(layers);
  kvs_block_t block = nullptr;
  kvs_block_stamp(model, nullptr, 0, flat(s.block_size), v.data(), v.size(), &block, nullptr,
                  nullptr);
  return block;
}

// Whether a block holds exactly the payload make_block(s, seed) has.
inline bool holds_seed(const kvs_block_t block, const Shape &s, uint64_t seed) {
  std::vector<Layer> layers =
      payload(s.n_layers, s.n_kv_heads, s.head_dim, s.block_size, s.dtype, seed);
  std::vector<kvs_block_layer> v = views(layers);
  size_t n = 0;
  const kvs_block_layer *got = kvs_block_layers(block, &n);
  return same_payload(got, n, v.data(), v.size());
}

}  // namespace kvs_test

#endif  // KVS_TESTS_BLOCKS_STORE_TEST_UTIL_H
