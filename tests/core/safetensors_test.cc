// safetensors headers: every tensor's bytes read from the header alone, and
// every lie a header can tell refused, naming the file and the field.
#include "core/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace {

// A fresh folder of its own for each test, under bazel's TEST_TMPDIR.
std::string scratch_dir() {
  const char *base = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/safetensors.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  EXPECT_NE(mkdtemp(buf.data()), nullptr);
  return std::string(buf.data());
}

void write_bytes(const std::string &path, const std::string &bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
}

std::string le64(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; i++) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out;
}

// A file of header (its length as declared, by default the true one) and
// data_bytes zero bytes of data.
std::string make_file(const std::string &dir, const std::string &name, const std::string &header,
                      size_t data_bytes, uint64_t declared = UINT64_MAX) {
  std::string path = dir + "/" + name;
  uint64_t n = declared == UINT64_MAX ? header.size() : declared;
  write_bytes(path, le64(n) + header + std::string(data_bytes, '\0'));
  return path;
}

struct Walk {
  std::vector<std::pair<std::string, uint64_t>> seen;
  size_t fail_at = SIZE_MAX;  // the call that answers an error
};

kvs_status collect(void *ctx, const char *name, uint64_t bytes, kvs_error *err) {
  Walk *walk = static_cast<Walk *>(ctx);
  if (walk->seen.size() == walk->fail_at) {
    return kvs_error_set(err, KVS_ERR_CONFLICT, "the callback refuses %s", name);
  }
  walk->seen.emplace_back(name, bytes);
  return KVS_OK;
}

// Reads path, expects want, and returns the message.
std::string refusal(const std::string &path, kvs_status want) {
  Walk walk;
  uint64_t n = 77;
  kvs_error err;
  EXPECT_EQ(kvs_safetensors_read_header(path.c_str(), collect, &walk, &n, &err), want) << path;
  EXPECT_EQ(err.status, want);
  EXPECT_EQ(n, 77u) << "the count is written only on success";
  EXPECT_TRUE(walk.seen.empty()) << "no tensor is handed over from a header that is refused";
  std::string m = err.message;
  EXPECT_NE(m.find(path), std::string::npos) << "the message names the file: " << m;
  return m;
}

// One tensor's entry.
std::string tensor(const std::string &name, const std::string &dtype, const std::string &shape,
                   uint64_t begin, uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + shape +
         "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

}  // namespace

TEST(Safetensors, a_valid_header_gives_each_tensor_and_its_bytes_in_header_order) {
  std::string dir = scratch_dir();
  // 12 + 16 + 8 + 3 + 5 = 44 bytes of data; F4 packs two elements a byte.
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}," +
                       tensor("model.layers.0.wkv.weight", "BF16", "2,3", 0, 12) + "," +
                       tensor("model.norm.weight", "F32", "4", 12, 28) + "," +
                       tensor("step", "I64", "", 28, 36) + "," +
                       tensor("experts.w1", "F4", "2,3", 36, 39) + "," +
                       tensor("experts.w1.scale", "F8_E8M0", "5", 39, 44) + "," +
                       tensor("empty", "F64", "0,7", 44, 44) + "}      ";
  std::string path = make_file(dir, "ok.safetensors", header, 44);
  Walk walk;
  uint64_t n = 0;
  kvs_error err;
  ASSERT_EQ(kvs_safetensors_read_header(path.c_str(), collect, &walk, &n, &err), KVS_OK)
      << err.message;
  EXPECT_EQ(n, 6u);
  std::vector<std::pair<std::string, uint64_t>> want = {{"model.layers.0.wkv.weight", 12},
                                                        {"model.norm.weight", 16},
                                                        {"step", 8},
                                                        {"experts.w1", 3},
                                                        {"experts.w1.scale", 5},
                                                        {"empty", 0}};
  EXPECT_EQ(walk.seen, want);
  uint64_t sum = 0;
  for (const auto &t : walk.seen) sum += t.second;
  EXPECT_EQ(sum, 44u);
  // Without a callback, or a count, it only checks.
  EXPECT_EQ(kvs_safetensors_read_header(path.c_str(), nullptr, nullptr, &n, &err), KVS_OK);
  EXPECT_EQ(kvs_safetensors_read_header(path.c_str(), nullptr, nullptr, nullptr, nullptr), KVS_OK);
}

TEST(Safetensors, only_the_header_is_read_never_the_data) {
  // A sparse 3 GiB file: reading its data would take seconds and memory.
  std::string dir = scratch_dir();
  std::string header = "{" + tensor("big", "U8", "3221225472", 0, 3221225472ull) + "}";
  std::string path = make_file(dir, "sparse.safetensors", header, 0);
  int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(8 + header.size() + 3221225472ull)), 0);
  close(fd);
  Walk walk;
  kvs_error err;
  ASSERT_EQ(kvs_safetensors_read_header(path.c_str(), collect, &walk, nullptr, &err), KVS_OK)
      << err.message;
  ASSERT_EQ(walk.seen.size(), 1u);
  EXPECT_EQ(walk.seen[0].second, 3221225472ull);
}

TEST(Safetensors, a_header_length_past_the_end_of_the_file_is_refused) {
  std::string dir = scratch_dir();
  std::string header = "{" + tensor("w", "F32", "2", 0, 8) + "}";
  std::string m = refusal(make_file(dir, "lies.safetensors", header, 8, 4096), KVS_ERR_PARSE);
  EXPECT_NE(m.find("header length 4096 lies about its length"), std::string::npos) << m;
  // A length that cannot even be an offset.
  m = refusal(make_file(dir, "huge.safetensors", header, 8, UINT64_MAX - 1), KVS_ERR_PARSE);
  EXPECT_NE(m.find("lies about its length"), std::string::npos) << m;
}

TEST(Safetensors, a_header_larger_than_the_limit_is_refused_before_it_is_read) {
  std::string dir = scratch_dir();
  std::string path = make_file(dir, "big-header.safetensors", "{", 0,
                               static_cast<uint64_t>(KVS_SAFETENSORS_MAX_HEADER) + 1);
  int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 200ll << 20), 0);  // sparse: costs no disk
  close(fd);
  std::string m = refusal(path, KVS_ERR_PARSE);
  EXPECT_NE(m.find("header length 100000001 is more than the 100000000-byte limit"),
            std::string::npos)
      << m;
}

TEST(Safetensors, a_file_shorter_than_the_length_field_is_refused) {
  std::string dir = scratch_dir();
  std::string empty = dir + "/empty.safetensors";
  write_bytes(empty, "");
  std::string m = refusal(empty, KVS_ERR_PARSE);
  EXPECT_NE(m.find("is 0 bytes, too short for its 8-byte header length"), std::string::npos) << m;
  std::string cut = dir + "/cut.safetensors";
  write_bytes(cut, std::string("\x10\0\0\0\0", 5));
  m = refusal(cut, KVS_ERR_PARSE);
  EXPECT_NE(m.find("is 5 bytes, too short"), std::string::npos) << m;
}

TEST(Safetensors, a_header_that_is_not_a_json_object_is_refused) {
  std::string dir = scratch_dir();
  // Length 0: nothing to parse.
  std::string m = refusal(make_file(dir, "zero.safetensors", "", 0), KVS_ERR_PARSE);
  EXPECT_NE(m.find("header is not valid JSON"), std::string::npos) << m;
  m = refusal(make_file(dir, "text.safetensors", "{\"w\": not json", 0), KVS_ERR_PARSE);
  EXPECT_NE(m.find("header is not valid JSON"), std::string::npos) << m;
  m = refusal(make_file(dir, "array.safetensors", "[1, 2]", 0), KVS_ERR_PARSE);
  EXPECT_NE(m.find("header is not a JSON object"), std::string::npos) << m;
  // A tensor named twice in one header.
  std::string twice = "{" + tensor("w", "U8", "1", 0, 1) + "," + tensor("w", "U8", "1", 1, 2) + "}";
  m = refusal(make_file(dir, "twice.safetensors", twice, 2), KVS_ERR_PARSE);
  EXPECT_NE(m.find("duplicate object key"), std::string::npos) << m;
  m = refusal(make_file(dir, "entry.safetensors", "{\"w\": [1]}", 0), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w is not a JSON object"), std::string::npos) << m;
  m = refusal(make_file(dir, "meta.safetensors", "{\"__metadata__\":{\"epoch\":3}}", 0),
              KVS_ERR_PARSE);
  EXPECT_NE(m.find("field __metadata__.epoch must be a string"), std::string::npos) << m;
}

TEST(Safetensors, an_unknown_dtype_is_refused_by_name_with_the_known_ones_listed) {
  std::string dir = scratch_dir();
  std::string header = "{" + tensor("model.layers.0.w", "Q4_K", "2", 0, 1) + "}";
  std::string m = refusal(make_file(dir, "dtype.safetensors", header, 1), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor model.layers.0.w: dtype \"Q4_K\" is unknown"), std::string::npos) << m;
  EXPECT_NE(m.find("BF16"), std::string::npos) << m;
  EXPECT_NE(m.find("F8_E8M0"), std::string::npos) << m;
  m = refusal(
      make_file(dir, "nodtype.safetensors", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
      KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w: field dtype is missing"), std::string::npos) << m;
}

TEST(Safetensors, a_shape_with_a_negative_or_non_integer_dimension_is_refused) {
  std::string dir = scratch_dir();
  std::string header = "{" + tensor("w", "F32", "2,-3", 0, 8) + "}";
  std::string m = refusal(make_file(dir, "neg.safetensors", header, 8), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w: shape[1] must be a non-negative integer"), std::string::npos) << m;
  header = "{" + tensor("w", "F32", "2.5", 0, 8) + "}";
  m = refusal(make_file(dir, "real.safetensors", header, 8), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w: shape[0] must be a non-negative integer"), std::string::npos) << m;
  m = refusal(make_file(dir, "noshape.safetensors",
                        "{\"w\":{\"dtype\":\"U8\",\"shape\":7,\"data_offsets\":[0,7]}}", 7),
              KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w: field shape must be an array"), std::string::npos) << m;
  // Elements x bytes past 64 bits.
  header = "{" + tensor("w", "F32", "2305843009213693952,4", 0, 8) + "}";
  m = refusal(make_file(dir, "wide.safetensors", header, 8), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w: shape x dtype does not fit in 64 bits"), std::string::npos) << m;
  header = "{" + tensor("w", "U8", "4294967296,4294967296", 0, 8) + "}";
  m = refusal(make_file(dir, "wider.safetensors", header, 8), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w: shape does not fit in 64 bits"), std::string::npos) << m;
  // Three F4 elements are a byte and a half.
  header = "{" + tensor("w", "F4", "3", 0, 2) + "}";
  m = refusal(make_file(dir, "half.safetensors", header, 2), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w: shape x dtype is 12 bits, not whole bytes"), std::string::npos) << m;
}

TEST(Safetensors, offsets_reversed_past_the_data_or_off_the_shape_are_refused) {
  std::string dir = scratch_dir();
  std::string header =
      "{" + tensor("a", "U8", "4", 0, 4) + "," + tensor("b", "U8", "4", 8, 4) + "}";
  std::string m = refusal(make_file(dir, "reversed.safetensors", header, 8), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor b: data_offsets [8, 4] are reversed"), std::string::npos) << m;
  header = "{" + tensor("w", "F32", "4", 0, 16) + "}";
  m = refusal(make_file(dir, "past.safetensors", header, 12), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w: data_offsets end 16 is past the 12 bytes of data"), std::string::npos)
      << m;
  header = "{" + tensor("w", "BF16", "2,3", 0, 10) + "}";
  m = refusal(make_file(dir, "span.safetensors", header, 12), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w: data_offsets span 10 bytes but shape x dtype BF16 is 12 bytes"),
            std::string::npos)
      << m;
  m = refusal(make_file(dir, "one.safetensors",
                        "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1),
              KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w: field data_offsets must be two non-negative integers"),
            std::string::npos)
      << m;
  m = refusal(make_file(dir, "negoff.safetensors",
                        "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 1),
              KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor w: field data_offsets must be two non-negative integers"),
            std::string::npos)
      << m;
  // A u64 offset past what JSON integers hold here (int64) is refused too.
  header = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]}}";
  m = refusal(make_file(dir, "u64.safetensors", header, 1), KVS_ERR_PARSE);
  EXPECT_NE(m.find("header is not valid JSON"), std::string::npos) << m;
}

TEST(Safetensors, a_fifo_a_directory_or_a_missing_file_is_refused_without_waiting) {
  std::string dir = scratch_dir();
  std::string fifo = dir + "/pipe.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  // Without O_NONBLOCK this open would wait for a writer forever.
  std::string m = refusal(fifo, KVS_ERR_IO);
  EXPECT_NE(m.find("is a FIFO, not a regular file"), std::string::npos) << m;
  m = refusal(dir, KVS_ERR_IO);
  EXPECT_NE(m.find("is a directory, not a regular file"), std::string::npos) << m;
  m = refusal(dir + "/absent.safetensors", KVS_ERR_IO);
  EXPECT_NE(m.find("cannot open safetensors file"), std::string::npos) << m;
  kvs_error err;
  EXPECT_EQ(kvs_safetensors_read_header(nullptr, nullptr, nullptr, nullptr, &err),
            KVS_ERR_INVALID_ARGUMENT);
}

TEST(Safetensors, a_callback_error_stops_the_walk_and_is_returned_as_it_is) {
  std::string dir = scratch_dir();
  std::string header = "{" + tensor("a", "U8", "1", 0, 1) + "," + tensor("b", "U8", "1", 1, 2) +
                       "," + tensor("c", "U8", "1", 2, 3) + "}";
  std::string path = make_file(dir, "stop.safetensors", header, 3);
  Walk walk;
  walk.fail_at = 1;
  uint64_t n = 77;
  kvs_error err;
  EXPECT_EQ(kvs_safetensors_read_header(path.c_str(), collect, &walk, &n, &err), KVS_ERR_CONFLICT);
  EXPECT_STREQ(err.message, "the callback refuses b");
  ASSERT_EQ(walk.seen.size(), 1u);  // a, then b refused; c never seen
  EXPECT_EQ(walk.seen[0].first, "a");
  EXPECT_EQ(n, 77u);
}

// The tensors must tile the data exactly, as the format's loaders require
// (the safetensors library sorts them by offsets, wants each to begin where
// the one before ends, and the last to end with the file).

TEST(Safetensors, a_header_that_covers_4_of_1000000_data_bytes_is_refused) {
  std::string dir = scratch_dir();
  std::string header = "{" + tensor("w", "F32", "1", 0, 4) + "}";
  std::string m = refusal(make_file(dir, "short.safetensors", header, 1000000), KVS_ERR_PARSE);
  EXPECT_NE(m.find("its 1 tensors cover 4 of the 1000000 data bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("bytes [4, 1000000) belong to no tensor"), std::string::npos) << m;
}

TEST(Safetensors, a_header_with_no_tensor_over_data_is_refused) {
  std::string dir = scratch_dir();
  std::string m = refusal(make_file(dir, "none.safetensors", "{}", 64), KVS_ERR_PARSE);
  EXPECT_NE(m.find("its 0 tensors cover 0 of the 64 data bytes"), std::string::npos) << m;
  m = refusal(make_file(dir, "meta.safetensors", "{\"__metadata__\":{\"format\":\"pt\"}}", 8),
              KVS_ERR_PARSE);
  EXPECT_NE(m.find("cover 0 of the 8 data bytes"), std::string::npos) << m;
  // No tensor and no data is a valid (empty) file.
  uint64_t n = 77;
  kvs_error err;
  EXPECT_EQ(kvs_safetensors_read_header(make_file(dir, "empty.safetensors", "{}", 0).c_str(),
                                        nullptr, nullptr, &n, &err),
            KVS_OK)
      << err.message;
  EXPECT_EQ(n, 0u);
}

TEST(Safetensors, three_tensors_at_the_same_offsets_are_refused_naming_two_of_them) {
  std::string dir = scratch_dir();
  std::string header = "{" + tensor("a", "F32", "4", 0, 16) + "," + tensor("b", "F32", "4", 0, 16) +
                       "," + tensor("c", "F32", "4", 0, 16) + "}";
  std::string m = refusal(make_file(dir, "same.safetensors", header, 16), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor b at data_offsets [0, 16] overlaps tensor a at [0, 16]"),
            std::string::npos)
      << m;
  // Whatever the key order, the same pair is named.
  header = "{" + tensor("c", "F32", "4", 0, 16) + "," + tensor("b", "F32", "4", 0, 16) + "," +
           tensor("a", "F32", "4", 0, 16) + "}";
  m = refusal(make_file(dir, "same2.safetensors", header, 16), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor b at data_offsets [0, 16] overlaps tensor a at [0, 16]"),
            std::string::npos)
      << m;
}

TEST(Safetensors, overlapping_and_gapped_tensors_are_refused_naming_the_bytes) {
  std::string dir = scratch_dir();
  std::string header =
      "{" + tensor("a", "U8", "8", 0, 8) + "," + tensor("b", "U8", "8", 4, 12) + "}";
  std::string m = refusal(make_file(dir, "overlap.safetensors", header, 12), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor b at data_offsets [4, 12] overlaps tensor a at [0, 8]"),
            std::string::npos)
      << m;
  header = "{" + tensor("a", "U8", "4", 0, 4) + "," + tensor("b", "U8", "4", 8, 12) + "}";
  m = refusal(make_file(dir, "gap.safetensors", header, 12), KVS_ERR_PARSE);
  EXPECT_NE(m.find("data bytes [4, 8) belong to no tensor: tensor a ends at 4 and the next, b, "
                   "begins at 8"),
            std::string::npos)
      << m;
  header = "{" + tensor("a", "U8", "4", 4, 8) + "}";
  m = refusal(make_file(dir, "late.safetensors", header, 8), KVS_ERR_PARSE);
  EXPECT_NE(m.find("data bytes [0, 4) belong to no tensor: the first tensor, a, begins at 4"),
            std::string::npos)
      << m;
  // An empty tensor inside another's bytes overlaps it, as the format's
  // loaders say; empty tensors between two others, or at the end, do not.
  header = "{" + tensor("a", "U8", "8", 0, 8) + "," + tensor("e", "U8", "0", 4, 4) + "}";
  m = refusal(make_file(dir, "inside.safetensors", header, 8), KVS_ERR_PARSE);
  EXPECT_NE(m.find("tensor e at data_offsets [4, 4] overlaps tensor a at [0, 8]"),
            std::string::npos)
      << m;
  header = "{" + tensor("a", "U8", "4", 0, 4) + "," + tensor("e", "U8", "0", 4, 4) + "," +
           tensor("f", "U8", "0", 4, 4) + "," + tensor("b", "U8", "4", 4, 8) + "," +
           tensor("z", "U8", "0", 8, 8) + "}";
  kvs_error err;
  EXPECT_EQ(kvs_safetensors_read_header(make_file(dir, "empties.safetensors", header, 8).c_str(),
                                        nullptr, nullptr, nullptr, &err),
            KVS_OK)
      << err.message;
}

TEST(Safetensors, tensors_listed_out_of_offset_order_still_tile) {
  std::string dir = scratch_dir();
  std::string header =
      "{" + tensor("late", "U8", "6", 10, 16) + "," + tensor("early", "U8", "10", 0, 10) + "}";
  Walk walk;
  kvs_error err;
  ASSERT_EQ(kvs_safetensors_read_header(make_file(dir, "order.safetensors", header, 16).c_str(),
                                        collect, &walk, nullptr, &err),
            KVS_OK)
      << err.message;
  std::vector<std::pair<std::string, uint64_t>> want = {{"late", 6}, {"early", 10}};
  EXPECT_EQ(walk.seen, want);  // handed over in header order
}
