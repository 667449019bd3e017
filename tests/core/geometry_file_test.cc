// Model configs read from a path (kvplan and kvsim --model): only a
// regular file is read, nothing blocks on a FIFO, and a file too large to
// be a config is refused by its size before it is read.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "core/geometry.h"

namespace {

std::string scratch(const char *name) {
  const char *base = getenv("TEST_TMPDIR");
  return std::string(base != nullptr ? base : "/tmp") + "/" + name;
}

std::string load_error(const std::string &path, kvs_status want) {
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_load_file(path.c_str(), &g, &err), want) << path;
  return err.message;
}

}  // namespace

TEST(GeometryFile, a_fifo_is_refused_by_its_type_without_waiting_for_a_writer) {
  std::string fifo = scratch("config.fifo");
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  // Without O_NONBLOCK this open would wait for a writer forever; the
  // test's timeout would be the only way out.
  std::string m = load_error(fifo, KVS_ERR_IO);
  EXPECT_NE(m.find("is a FIFO, not a regular file"), std::string::npos) << m;
  kvs_geometry g;
  EXPECT_EQ(kvs_geometry_resolve(fifo.c_str(), &g, nullptr), KVS_ERR_IO);
}

TEST(GeometryFile, a_directory_or_device_is_refused_by_its_type) {
  std::string m = load_error(scratch(""), KVS_ERR_IO);
  EXPECT_NE(m.find("is a directory, not a regular file"), std::string::npos) << m;
  m = load_error("/dev/zero", KVS_ERR_IO);
  EXPECT_NE(m.find("is a character device, not a regular file"), std::string::npos) << m;
  m = load_error(scratch("absent.json"), KVS_ERR_IO);
  EXPECT_NE(m.find("cannot open model config"), std::string::npos) << m;
}

TEST(GeometryFile, a_file_too_large_for_a_config_is_refused_by_its_size) {
  std::string huge = scratch("huge.json");
  int fd = open(huge.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "{", 1), 1);
  ASSERT_EQ(ftruncate(fd, 3ll << 30), 0);  // sparse: costs no disk
  close(fd);
  std::string m = load_error(huge, KVS_ERR_PARSE);
  EXPECT_NE(m.find("is larger than 16777216 bytes"), std::string::npos) << m;
  unlink(huge.c_str());
}

TEST(GeometryFile, a_symbolic_link_to_a_config_is_read) {
  std::string config = scratch("small.json");
  int fd = open(config.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const std::string text =
      "{\"num_hidden_layers\": 2, \"head_dim\": 512, \"index_head_dim\": 128, "
      "\"compress_ratios\": [0, 4]}";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  std::string link = scratch("link.json");
  unlink(link.c_str());
  ASSERT_EQ(symlink(config.c_str(), link.c_str()), 0);
  kvs_geometry g;
  kvs_error err;
  ASSERT_EQ(kvs_geometry_load_file(link.c_str(), &g, &err), KVS_OK) << err.message;
  EXPECT_EQ(g.n_layers, 2u);
}
