// A model folder's weights per layer from its safetensors headers: the
// bundled tiny model (tests/data/model-tiny, see tests/data/README.md) gives
// exactly its table, with or without its index, and every disagreement
// between the index and the shards is refused, naming both.
#include "core/model_weights.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/geometry.h"

namespace {

// The test runs from the runfiles root, where the workspace's files lie.
const char kTiny[] = "tests/data/model-tiny";
const char kShard1[] = "model-00001-of-00002.safetensors";
const char kShard2[] = "model-00002-of-00002.safetensors";
const char kIndex[] = "model.safetensors.index.json";

// The table of tests/data/README.md.
constexpr uint64_t kEmbed = 2048;
constexpr uint64_t kLayers[4] = {448, 832, 1088, 1344};
constexpr uint64_t kMtp = 1056;
constexpr uint64_t kHead = 2112;
constexpr uint64_t kTotal = 8928;

std::string scratch_dir() {
  const char *base = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/weights.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  EXPECT_NE(mkdtemp(buf.data()), nullptr);
  return std::string(buf.data());
}

std::string read_text(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

void copy_file(const std::string &from, const std::string &to) { write_text(to, read_text(from)); }

// A folder holding copies of the tiny model's two shards, and its index
// when asked.
std::string tiny_copy(bool with_index) {
  std::string dir = scratch_dir();
  copy_file(std::string(kTiny) + "/" + kShard1, dir + "/" + kShard1);
  copy_file(std::string(kTiny) + "/" + kShard2, dir + "/" + kShard2);
  if (with_index) copy_file(std::string(kTiny) + "/" + kIndex, dir + "/" + kIndex);
  return dir;
}

// Replaces the first `from` of text with `to`.
std::string replace(std::string text, const std::string &from, const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string le64(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; i++) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out;
}

// A shard of U8 tensors, tensor i holding sizes[i] bytes.
void write_shard(const std::string &path, const std::vector<std::string> &names,
                 const std::vector<uint64_t> &sizes) {
  std::string header = "{";
  uint64_t offset = 0;
  for (size_t i = 0; i < names.size(); i++) {
    if (i > 0) header += ",";
    header += "\"" + names[i] + "\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(sizes[i]) +
              "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + sizes[i]) + "]}";
    offset += sizes[i];
  }
  header += "}";
  write_text(path, le64(header.size()) + header + std::string(offset, '\0'));
}

// Loads folder, expects want, checks *out was left alone, returns the
// message.
std::string refusal(const std::string &folder, size_t n_layers, kvs_status want) {
  kvs_model_weights out;
  memset(&out, 0xab, sizeof out);
  kvs_model_weights before = out;
  kvs_error err;
  EXPECT_EQ(kvs_model_weights_load(folder.c_str(), n_layers, &out, &err), want) << folder;
  EXPECT_EQ(err.status, want);
  EXPECT_EQ(memcmp(&out, &before, sizeof out), 0) << "a refusal leaves *out untouched";
  return err.message;
}

void expect_tiny_table(const kvs_model_weights &w) {
  EXPECT_EQ(w.embed_bytes, kEmbed);
  ASSERT_EQ(w.n_layers, 4u);
  for (size_t i = 0; i < 4; i++) EXPECT_EQ(w.layer_bytes[i], kLayers[i]) << "layer " << i;
  EXPECT_EQ(w.mtp_bytes, kMtp);
  EXPECT_EQ(w.head_bytes, kHead);
  EXPECT_EQ(w.total_bytes, kTotal);
  EXPECT_EQ(w.embed_bytes + kLayers[0] + kLayers[1] + kLayers[2] + kLayers[3] + w.mtp_bytes +
                w.head_bytes,
            w.total_bytes);
  EXPECT_EQ(w.n_files, 2u);
  EXPECT_EQ(w.n_tensors, 20u);
}

}  // namespace

TEST(ModelWeights, the_bundled_tiny_model_gives_its_readme_table) {
  // Its config is one kvshard's geometry parser takes, and gives the layers.
  kvs_geometry g;
  kvs_error err;
  ASSERT_EQ(kvs_geometry_load_file((std::string(kTiny) + "/config.json").c_str(), &g, &err), KVS_OK)
      << err.message;
  ASSERT_EQ(g.n_layers, 4u);
  kvs_model_weights w;
  ASSERT_EQ(kvs_model_weights_load(kTiny, g.n_layers, &w, &err), KVS_OK) << err.message;
  expect_tiny_table(w);
  // The index's total_size is the same sum.
  EXPECT_NE(read_text(std::string(kTiny) + "/" + kIndex).find("\"total_size\": 8928"),
            std::string::npos);
  // A trailing slash names the same folder.
  ASSERT_EQ(kvs_model_weights_load((std::string(kTiny) + "/").c_str(), 4, &w, &err), KVS_OK)
      << err.message;
  expect_tiny_table(w);
}

TEST(ModelWeights, without_the_index_every_shard_of_the_folder_gives_the_same_table) {
  std::string dir = tiny_copy(false);
  kvs_model_weights w;
  kvs_error err;
  ASSERT_EQ(kvs_model_weights_load(dir.c_str(), 4, &w, &err), KVS_OK) << err.message;
  expect_tiny_table(w);
  // Shards linked in, as in a Hugging Face cache snapshot, count the same;
  // other files and hidden "._" files are not shards.
  std::string linked = scratch_dir();
  std::string cwd(4096, '\0');
  ASSERT_NE(getcwd(&cwd[0], cwd.size()), nullptr);
  cwd.resize(strlen(cwd.c_str()));
  for (const char *shard : {kShard1, kShard2}) {
    std::string target = cwd + "/" + kTiny + "/" + shard;
    ASSERT_EQ(symlink(target.c_str(), (linked + "/" + shard).c_str()), 0);
  }
  copy_file(std::string(kTiny) + "/config.json", linked + "/config.json");
  write_text(linked + "/._" + kShard1, "AppleDouble");
  ASSERT_EQ(kvs_model_weights_load(linked.c_str(), 4, &w, &err), KVS_OK) << err.message;
  expect_tiny_table(w);
}

TEST(ModelWeights, tensors_are_placed_by_layer_mtp_embedding_and_head) {
  // The tiny model read as a 2-layer one: layers 2, 3 and 4 are MTP.
  kvs_model_weights w;
  kvs_error err;
  ASSERT_EQ(kvs_model_weights_load(kTiny, 2, &w, &err), KVS_OK) << err.message;
  EXPECT_EQ(w.n_layers, 2u);
  EXPECT_EQ(w.layer_bytes[0], kLayers[0]);
  EXPECT_EQ(w.layer_bytes[1], kLayers[1]);
  EXPECT_EQ(w.mtp_bytes, kLayers[2] + kLayers[3] + kMtp);
  EXPECT_EQ(w.total_bytes, kTotal);
  // DeepSeek's own names (no "model." prefix, "mtp.<i>." draft layers) and
  // names that only look like layers.
  std::string dir = scratch_dir();
  write_shard(dir + "/native.safetensors",
              {"embed.weight", "layers.0.attn.wkv.weight", "layers.1.ffn.w1.weight",
               "mtp.0.emb.tok_emb.weight", "model.layers.9.embed_tokens.weight", "head.weight",
               "norm.weight", "model.mtp_layers.0.weight", "model.layers.x.weight"},
              {1, 2, 4, 8, 16, 32, 64, 128, 256});
  ASSERT_EQ(kvs_model_weights_load(dir.c_str(), 2, &w, &err), KVS_OK) << err.message;
  EXPECT_EQ(w.embed_bytes, 1u);
  EXPECT_EQ(w.layer_bytes[0], 2u);
  EXPECT_EQ(w.layer_bytes[1], 4u);
  EXPECT_EQ(w.mtp_bytes, 8u + 16u);
  EXPECT_EQ(w.head_bytes, 32u + 64u + 128u + 256u);
  EXPECT_EQ(w.total_bytes, 511u);
  EXPECT_EQ(w.n_tensors, 9u);
  EXPECT_EQ(w.n_files, 1u);
}

TEST(ModelWeights, routed_experts_are_told_from_shared_weights_by_name) {
  EXPECT_TRUE(kvs_model_weights_is_routed_expert("model.layers.0.mlp.experts.3.gate_proj.weight"));
  EXPECT_TRUE(kvs_model_weights_is_routed_expert("layers.1.ffn.experts.17.w1.weight"));
  EXPECT_TRUE(kvs_model_weights_is_routed_expert("mtp.0.ffn.experts.2.w2.scale"));
  EXPECT_TRUE(kvs_model_weights_is_routed_expert("mlp.experts.0.w"));
  EXPECT_FALSE(kvs_model_weights_is_routed_expert("model.layers.0.mlp.shared_experts.up.weight"));
  EXPECT_FALSE(kvs_model_weights_is_routed_expert("layers.1.ffn.shared_experts.w1.weight"));
  EXPECT_FALSE(kvs_model_weights_is_routed_expert("model.layers.0.mlp.experts.w13_weight"));
  EXPECT_FALSE(kvs_model_weights_is_routed_expert("model.layers.0.mlp.gate.weight"));
  EXPECT_FALSE(kvs_model_weights_is_routed_expert("model.layers.0.xmlp.experts.1.w"));
  EXPECT_FALSE(kvs_model_weights_is_routed_expert(nullptr));
}

TEST(ModelWeights, routed_expert_bytes_are_counted_per_layer_and_for_mtp) {
  std::string dir = scratch_dir();
  write_shard(
      dir + "/moe.safetensors",
      {"model.layers.0.mlp.experts.3.gate_proj.weight",
       "model.layers.0.mlp.shared_experts.up_proj.weight", "layers.1.ffn.experts.17.w1.weight",
       "layers.1.ffn.shared_experts.w1.weight", "layers.1.attn.wkv.weight",
       "mtp.0.ffn.experts.2.w2.weight", "mtp.0.attn.wkv.weight", "embed.weight", "head.weight"},
      {1, 2, 4, 8, 16, 32, 64, 128, 256});
  kvs_model_weights w;
  kvs_error err;
  ASSERT_EQ(kvs_model_weights_load(dir.c_str(), 2, &w, &err), KVS_OK) << err.message;
  EXPECT_EQ(w.layer_bytes[0], 3u);
  EXPECT_EQ(w.layer_expert_bytes[0], 1u);
  EXPECT_EQ(w.layer_bytes[1], 28u);
  EXPECT_EQ(w.layer_expert_bytes[1], 4u);
  EXPECT_EQ(w.mtp_bytes, 96u);
  EXPECT_EQ(w.mtp_expert_bytes, 32u);
  EXPECT_EQ(w.expert_bytes, 37u);
  EXPECT_EQ(w.n_expert_tensors, 3u);
  EXPECT_EQ(w.total_bytes, 511u);
  // The bundled tiny model has no routed expert.
  ASSERT_EQ(kvs_model_weights_load(kTiny, 4, &w, &err), KVS_OK) << err.message;
  EXPECT_EQ(w.n_expert_tensors, 0u);
  EXPECT_EQ(w.expert_bytes, 0u);
}

TEST(ModelWeights, an_index_naming_a_missing_shard_is_refused) {
  std::string dir = tiny_copy(true);
  ASSERT_EQ(unlink((dir + "/" + kShard2).c_str()), 0);
  std::string m = refusal(dir, 4, KVS_ERR_IO);
  EXPECT_NE(m.find(dir + "/" + kIndex + " names shard " + kShard2), std::string::npos) << m;
  EXPECT_NE(m.find("No such file or directory"), std::string::npos) << m;
}

TEST(ModelWeights, an_index_and_a_shard_that_disagree_are_refused_naming_both) {
  std::string dir = tiny_copy(true);
  std::string index = read_text(std::string(kTiny) + "/" + kIndex);
  // The index lists a tensor its shard does not hold.
  write_text(dir + "/" + kIndex,
             replace(index, "\"lm_head.weight\"",
                     "\"model.extra.weight\": \"model-00001-of-00002.safetensors\",\n    "
                     "\"lm_head.weight\""));
  std::string m = refusal(dir, 4, KVS_ERR_PARSE);
  EXPECT_NE(m.find("lists tensor model.extra.weight in shard " + std::string(kShard1) +
                   ", but that shard's header does not hold it"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(dir + "/" + kIndex), std::string::npos) << m;
  // The index puts a tensor in the other shard.
  write_text(dir + "/" + kIndex, replace(index, "\"lm_head.weight\": \"model-00002",
                                         "\"lm_head.weight\": \"model-00001"));
  m = refusal(dir, 4, KVS_ERR_PARSE);
  EXPECT_NE(m.find("lists tensor lm_head.weight in shard " + std::string(kShard1) +
                   ", but it is in shard " + kShard2),
            std::string::npos)
      << m;
  // A shard holds a tensor the index does not list.
  write_text(dir + "/" + kIndex,
             replace(index, "\"lm_head.weight\": \"model-00002-of-00002.safetensors\",\n", ""));
  m = refusal(dir, 4, KVS_ERR_PARSE);
  EXPECT_NE(m.find("shard " + std::string(kShard2) +
                   " holds tensor lm_head.weight, but model "
                   "index " +
                   dir + "/" + kIndex + " does not list it"),
            std::string::npos)
      << m;
}

TEST(ModelWeights, a_tensor_in_two_shards_is_refused_as_a_conflict) {
  // Without an index: the same shard under two names.
  std::string dir = tiny_copy(false);
  copy_file(dir + "/" + kShard1, dir + "/model-copy.safetensors");
  std::string m = refusal(dir, 4, KVS_ERR_CONFLICT);
  EXPECT_NE(m.find("tensor model.embed_tokens.weight is in two shards, " + std::string(kShard1) +
                   " and model-copy.safetensors"),
            std::string::npos)
      << m;
  // With one: the index names both copies, each for some tensors.
  dir = tiny_copy(true);
  copy_file(dir + "/" + kShard1, dir + "/model-copy.safetensors");
  std::string index = read_text(std::string(kTiny) + "/" + kIndex);
  write_text(dir + "/" + kIndex, replace(index, "\"model.norm.weight\": \"model-00002-of-00002",
                                         "\"model.norm.weight\": \"model-copy"));
  m = refusal(dir, 4, KVS_ERR_CONFLICT);
  EXPECT_NE(m.find("is in two shards"), std::string::npos) << m;
}

TEST(ModelWeights, a_folder_without_weights_is_refused) {
  std::string dir = scratch_dir();
  std::string m = refusal(dir, 4, KVS_ERR_IO);
  EXPECT_EQ(m,
            "no weights: neither model.safetensors.index.json nor a .safetensors file in " + dir);
  write_text(dir + "/config.json", "{}");
  m = refusal(dir, 4, KVS_ERR_IO);
  EXPECT_NE(m.find("no weights"), std::string::npos) << m;
  m = refusal(dir + "/absent", 4, KVS_ERR_IO);
  EXPECT_NE(m.find("cannot open model folder " + dir + "/absent"), std::string::npos) << m;
  m = refusal(dir + "/config.json", 4, KVS_ERR_IO);
  EXPECT_NE(m.find("is a regular file, not a directory"), std::string::npos) << m;
}

TEST(ModelWeights, an_index_shard_name_outside_the_folder_is_refused) {
  std::string dir = tiny_copy(true);
  std::string index = read_text(std::string(kTiny) + "/" + kIndex);
  for (const char *bad :
       {"../model-00002-of-00002.safetensors", "sub/model.safetensors", "..", "."}) {
    write_text(dir + "/" + kIndex,
               replace(index, "\"model.norm.weight\": \"model-00002-of-00002.safetensors\"",
                       std::string("\"model.norm.weight\": \"") + bad + "\""));
    std::string m = refusal(dir, 4, KVS_ERR_PARSE);
    EXPECT_NE(m.find("weight_map[\"model.norm.weight\"] names shard \"" + std::string(bad) +
                     "\", not a plain file name"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find(dir + "/" + kIndex), std::string::npos) << m;
  }
  write_text(dir + "/" + kIndex, "{\"metadata\": {}}");
  std::string m = refusal(dir, 4, KVS_ERR_PARSE);
  EXPECT_NE(m.find("field weight_map is missing"), std::string::npos) << m;
  write_text(dir + "/" + kIndex, "{\"weight_map\": ");
  m = refusal(dir, 4, KVS_ERR_PARSE);
  EXPECT_NE(m.find("is not valid JSON"), std::string::npos) << m;
}

TEST(ModelWeights, a_bad_shard_or_a_non_regular_one_is_refused_naming_it) {
  std::string dir = tiny_copy(false);
  write_text(dir + "/model-00003.safetensors", le64(4096) + "{}");
  std::string m = refusal(dir, 4, KVS_ERR_PARSE);
  EXPECT_NE(m.find(dir + "/model-00003.safetensors: header length 4096 lies about its length"),
            std::string::npos)
      << m;
  ASSERT_EQ(unlink((dir + "/model-00003.safetensors").c_str()), 0);
  ASSERT_EQ(mkfifo((dir + "/model-00003.safetensors").c_str(), 0644), 0);
  m = refusal(dir, 4, KVS_ERR_IO);
  EXPECT_NE(m.find("model-00003.safetensors is a FIFO, not a regular file"), std::string::npos)
      << m;
  // A FIFO in place of the index is refused by its kind, without waiting.
  std::string fifo = tiny_copy(false);
  ASSERT_EQ(mkfifo((fifo + "/" + kIndex).c_str(), 0644), 0);
  m = refusal(fifo, 4, KVS_ERR_IO);
  EXPECT_NE(m.find(kIndex + std::string(" is a FIFO, not a regular file")), std::string::npos) << m;
}

TEST(ModelWeights, a_layer_count_out_of_range_or_a_null_argument_is_refused) {
  std::string m = refusal(kTiny, 0, KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(m.find("n_layers is 0 for model folder tests/data/model-tiny"), std::string::npos) << m;
  m = refusal(kTiny, KVS_MAX_LAYERS + 1, KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(m.find("n_layers is 1025"), std::string::npos) << m;
  kvs_error err;
  kvs_model_weights w;
  EXPECT_EQ(kvs_model_weights_load(nullptr, 4, &w, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_model_weights_load(kTiny, 4, nullptr, &err), KVS_ERR_INVALID_ARGUMENT);
}
