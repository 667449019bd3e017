// The seed's compressor-schedule cases, and config.json loading.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "core/geometry.h"
#include "tests/core/fixtures.h"

using namespace kvs_test;

namespace {

std::vector<kvs_compressor> compressors(const kvs_geometry &g) {
  std::vector<kvs_compressor> out(KVS_MAX_LAYERS);
  size_t n = 0;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_compressors(&g, out.data(), out.size(), &n, &err), KVS_OK) << err.message;
  out.resize(n);
  return out;
}

}  // namespace

TEST(Compressors, the_shipped_schedule_reads_as_three_different_mechanisms) {
  kvs_geometry g = make_geometry(64, 32, 8, {0, 0, 4, 128, 4, 128, 4, 0});
  std::vector<kvs_compressor> expected = {
      KVS_COMPRESSOR_NONE, KVS_COMPRESSOR_NONE, KVS_COMPRESSOR_CSA, KVS_COMPRESSOR_HCA,
      KVS_COMPRESSOR_CSA,  KVS_COMPRESSOR_HCA,  KVS_COMPRESSOR_CSA, KVS_COMPRESSOR_NONE};
  EXPECT_EQ(compressors(g), expected);
}

TEST(Compressors, the_indexer_and_the_projection_width_follow_from_the_mechanism) {
  EXPECT_TRUE(kvs_compressor_has_indexer(KVS_COMPRESSOR_CSA));
  EXPECT_FALSE(kvs_compressor_has_indexer(KVS_COMPRESSOR_HCA));
  EXPECT_FALSE(kvs_compressor_has_indexer(KVS_COMPRESSOR_NONE));

  EXPECT_EQ(kvs_compressor_projection_width_multiple(KVS_COMPRESSOR_CSA), 2u);
  EXPECT_EQ(kvs_compressor_projection_width_multiple(KVS_COMPRESSOR_HCA), 1u);
  EXPECT_EQ(kvs_compressor_projection_width_multiple(KVS_COMPRESSOR_NONE), 1u);

  EXPECT_TRUE(kvs_compressor_overlapping(KVS_COMPRESSOR_CSA));
  EXPECT_FALSE(kvs_compressor_overlapping(KVS_COMPRESSOR_HCA));
}

TEST(Compressors, a_query_sees_one_compressed_entry_per_completed_block) {
  kvs_compressor csa = KVS_COMPRESSOR_CSA;
  EXPECT_EQ(kvs_compressor_visible_compressed(csa, 0), 0u) << "no block is complete yet";
  EXPECT_EQ(kvs_compressor_visible_compressed(csa, 2), 0u);
  EXPECT_EQ(kvs_compressor_visible_compressed(csa, 3), 1u) << "the first block just closed";
  EXPECT_EQ(kvs_compressor_visible_compressed(csa, 7), 2u);
  EXPECT_EQ(kvs_compressor_visible_compressed(csa, 8), 2u);

  kvs_compressor hca = KVS_COMPRESSOR_HCA;
  EXPECT_EQ(kvs_compressor_visible_compressed(hca, 126), 0u);
  EXPECT_EQ(kvs_compressor_visible_compressed(hca, 127), 1u);
  EXPECT_EQ(kvs_compressor_visible_compressed(hca, 255), 2u);

  // No compressor sees nothing, at any position (not a division by zero).
  for (uint64_t pos : {0ull, 1ull, 127ull, 1000000ull}) {
    EXPECT_EQ(kvs_compressor_visible_compressed(KVS_COMPRESSOR_NONE, pos), 0u);
  }
}

TEST(Compressors, an_unknown_ratio_is_refused_and_names_its_layer) {
  kvs_compressor c = KVS_COMPRESSOR_HCA;
  EXPECT_FALSE(kvs_compressor_from_ratio(7, &c));
  EXPECT_FALSE(kvs_compressor_from_ratio(64, &c));
  EXPECT_EQ(c, KVS_COMPRESSOR_HCA) << "a refused ratio writes nothing";

  kvs_geometry g = make_geometry(64, 32, 3, {0, 64, 128});
  kvs_compressor out[3] = {KVS_COMPRESSOR_HCA, KVS_COMPRESSOR_HCA, KVS_COMPRESSOR_HCA};
  size_t n = 99;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_compressors(&g, out, 3, &n, &err), KVS_ERR_UNKNOWN_RATIO);
  EXPECT_NE(std::string(err.message).find("layer 1"), std::string::npos) << err.message;
  EXPECT_NE(std::string(err.message).find("ratio 64"), std::string::npos) << err.message;
  EXPECT_EQ(n, 99u);
  EXPECT_EQ(out[0], KVS_COMPRESSOR_HCA) << "the whole schedule is refused, nothing written";
  EXPECT_EQ(kvs_geometry_validate(&g, &err), KVS_ERR_UNKNOWN_RATIO);
}

TEST(Compressors, the_schedule_and_the_sizing_read_the_same_truncated_array) {
  kvs_geometry g = make_geometry(64, 32, 3, {4, 128, 0, 4});
  ASSERT_EQ(kvs_geometry_layer_count(&g), 3u);
  std::vector<kvs_compressor> cs = compressors(g);
  ASSERT_EQ(cs.size(), 3u);
  uint32_t ratios[] = {4, 128, 0};
  for (size_t i = 0; i < cs.size(); i++) {
    EXPECT_EQ(kvs_compressor_ratio(cs[i]), ratios[i]);
    EXPECT_EQ(g.compress_ratios[i], ratios[i]);
  }
  // The priced stack is the same three layers.
  kvs_cost_terms terms;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 3, nullptr, &terms, nullptr), KVS_OK);
  EXPECT_EQ(terms.n_layers, 3u);
  EXPECT_EQ(terms.n_csa, 1u);
  EXPECT_EQ(terms.n_hca, 1u);
}

TEST(Compressors, the_ring_table_and_the_compressor_table_agree_on_which_ratios_exist) {
  for (uint32_t ratio : {KVS_CSA_RATIO, KVS_HCA_RATIO}) {
    kvs_compressor c;
    EXPECT_TRUE(kvs_compressor_from_ratio(ratio, &c));
    uint64_t ring = 0;
    EXPECT_EQ(kvs_ring_size_for_ratio(ratio, &ring, nullptr), KVS_OK);
    EXPECT_GT(ring, 0u);
  }
  // Ratio 0 is a mechanism but has no ring: no compressor, no carry state.
  kvs_compressor c;
  EXPECT_TRUE(kvs_compressor_from_ratio(0, &c));
  EXPECT_EQ(c, KVS_COMPRESSOR_NONE);
  uint64_t ring = 77;
  EXPECT_EQ(kvs_ring_size_for_ratio(0, &ring, nullptr), KVS_ERR_UNKNOWN_RATIO);
  EXPECT_EQ(ring, 77u);
}

// ---- config.json ----

TEST(GeometryJson, loads_the_four_fields_and_ignores_the_rest) {
  const char *text =
      R"({"num_hidden_layers": 3, "head_dim": 64, "index_head_dim": 32,
          "hidden_size": 4096, "compress_ratios": [0, 4, 128, 0]})";
  kvs_geometry g;
  kvs_error err;
  ASSERT_EQ(kvs_geometry_parse_json(text, strlen(text), &g, &err), KVS_OK) << err.message;
  EXPECT_EQ(g.n_layers, 3u);
  EXPECT_EQ(g.head_dim, 64u);
  EXPECT_EQ(g.index_head_dim, 32u);
  EXPECT_EQ(g.n_ratios, 4u);
  EXPECT_EQ(kvs_geometry_layer_count(&g), 3u);
}

struct BadConfig {
  const char *text;
  const char *names;  // what the message must name
};

TEST(GeometryJson, a_bad_config_is_refused_naming_the_field_and_leaves_the_output_alone) {
  const BadConfig cases[] = {
      {"{", "line 1"},
      {"[1, 2]", "not a JSON object"},
      {R"({"head_dim": 64, "index_head_dim": 32, "compress_ratios": [0]})", "num_hidden_layers"},
      {R"({"num_hidden_layers": 1, "head_dim": "64", "index_head_dim": 32,
           "compress_ratios": [0]})",
       "head_dim"},
      {R"({"num_hidden_layers": 1, "head_dim": 64, "index_head_dim": -1,
           "compress_ratios": [0]})",
       "index_head_dim"},
      {R"({"num_hidden_layers": 1, "head_dim": 64, "index_head_dim": 32})", "compress_ratios"},
      {R"({"num_hidden_layers": 2, "head_dim": 64, "index_head_dim": 32,
           "compress_ratios": [0, 1.5]})",
       "compress_ratios[1]"},
      {R"({"num_hidden_layers": 2, "head_dim": 64, "index_head_dim": 32,
           "compress_ratios": [0, 8]})",
       "layer 1"},
      {R"({"num_hidden_layers": 0, "head_dim": 64, "index_head_dim": 32,
           "compress_ratios": [0]})",
       "no layers"},
      {R"({"num_hidden_layers": 1, "head_dim": 0, "index_head_dim": 32,
           "compress_ratios": [0]})",
       "head_dim is 0"},
      {R"({"num_hidden_layers": 61, "head_dim": 64, "index_head_dim": 32,
           "compress_ratios": [0, 4]})",
       "num_hidden_layers is 61 but compress_ratios lists 2"},
  };
  for (const BadConfig &c : cases) {
    kvs_geometry g = args();
    kvs_error err;
    kvs_status status = kvs_geometry_parse_json(c.text, strlen(c.text), &g, &err);
    EXPECT_NE(status, KVS_OK) << c.text;
    EXPECT_NE(std::string(err.message).find(c.names), std::string::npos)
        << "message '" << err.message << "' should name '" << c.names << "'";
    EXPECT_EQ(g.n_layers, 4u) << "a refused config leaves the output as it was";
    EXPECT_EQ(g.head_dim, 8u);
  }
}

TEST(GeometryJson, a_missing_file_names_the_path) {
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_load_file("/nonexistent/config.json", &g, &err), KVS_ERR_IO);
  EXPECT_NE(std::string(err.message).find("/nonexistent/config.json"), std::string::npos);
}

// The built-in names are compiled from core/models/*.json; the fixtures are
// those same files, read from disk here.
TEST(GeometryJson, the_builtin_geometries_equal_their_config_fixtures) {
  for (const char *name : {"dsv4-flash", "dsv4-pro"}) {
    kvs_geometry builtin, fixture;
    kvs_error err;
    ASSERT_EQ(kvs_geometry_builtin(name, &builtin, &err), KVS_OK) << err.message;
    std::string path = std::string("core/models/") + name + ".json";
    ASSERT_EQ(kvs_geometry_load_file(path.c_str(), &fixture, &err), KVS_OK) << err.message;
    EXPECT_EQ(memcmp(&builtin, &fixture, sizeof builtin), 0) << name;
    kvs_geometry resolved;
    ASSERT_EQ(kvs_geometry_resolve(path.c_str(), &resolved, &err), KVS_OK) << err.message;
    EXPECT_EQ(memcmp(&builtin, &resolved, sizeof builtin), 0) << name;
  }
}

TEST(GeometryJson, dsv4_flash_has_two_window_only_21_csa_and_20_hca_layers) {
  kvs_geometry g;
  ASSERT_EQ(kvs_geometry_builtin("dsv4-flash", &g, nullptr), KVS_OK);
  EXPECT_EQ(g.n_layers, 43u);
  EXPECT_EQ(g.n_ratios, 44u) << "the MTP layer's ratio ships but is not read";
  EXPECT_EQ(g.head_dim, 512u);
  EXPECT_EQ(g.index_head_dim, 128u);
  kvs_cost_terms t;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 43, nullptr, &t, nullptr), KVS_OK);
  EXPECT_EQ(t.n_csa, 21u);
  EXPECT_EQ(t.n_hca, 20u);
  EXPECT_EQ(t.n_layers - t.n_csa - t.n_hca, 2u);
}

TEST(GeometryJson, dsv4_pro_has_31_hca_and_30_csa_layers_and_none_window_only) {
  kvs_geometry g;
  ASSERT_EQ(kvs_geometry_builtin("dsv4-pro", &g, nullptr), KVS_OK);
  EXPECT_EQ(g.n_layers, 61u);
  EXPECT_EQ(g.n_ratios, 62u);
  kvs_cost_terms t;
  ASSERT_EQ(kvs_cost_terms_make(&g, 0, 61, nullptr, &t, nullptr), KVS_OK);
  EXPECT_EQ(t.n_hca, 31u);
  EXPECT_EQ(t.n_csa, 30u);
}

TEST(GeometryJson, an_unknown_builtin_lists_the_known_names) {
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_builtin("dsv5", &g, &err), KVS_ERR_NOT_FOUND);
  EXPECT_NE(std::string(err.message).find("dsv4-flash"), std::string::npos) << err.message;
  EXPECT_NE(std::string(err.message).find("dsv4-pro"), std::string::npos) << err.message;
}
