// SGLang's DeepSeek-V4 pool sizing (core/sglang_pools.h) against its
// published per-token figures and pool sizes worked out by hand below.
//
// Every expected number is derived in the comments from the model's
// widths, not by calling the code under test twice; where a quotient's
// integer part matters, the test also recomputes it in long double (64-bit
// significand) to show it is nowhere near a rounding boundary.
#include "core/sglang_pools.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/geometry.h"

namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kRope = 64;
constexpr uint64_t kWindow = 128;
constexpr uint64_t kContext = 1048576;

kvs_geometry builtin(const char *name) {
  kvs_geometry g;
  kvs_error err;
  EXPECT_EQ(kvs_geometry_builtin(name, &g, &err), KVS_OK) << err.message;
  return g;
}

kvs_sglang_model model_of(const kvs_geometry &g, size_t first, size_t end) {
  kvs_sglang_model m{};
  kvs_error err;
  EXPECT_EQ(kvs_sglang_model_make(&g, first, end, kRope, kWindow, kContext, &m, &err), KVS_OK)
      << err.message;
  return m;
}

kvs_sglang_model flash() {
  kvs_geometry g = builtin("dsv4-flash");
  return model_of(g, 0, kvs_geometry_layer_count(&g));
}

kvs_sglang_model pro() {
  kvs_geometry g = builtin("dsv4-pro");
  return model_of(g, 0, kvs_geometry_layer_count(&g));
}

kvs_sglang_options options(double swa_ratio, uint64_t max_running, bool speculative = false,
                           uint64_t page = KVS_SGLANG_DEFAULT_PAGE) {
  kvs_sglang_options o = KVS_SGLANG_OPTIONS_INIT;
  o.swa_ratio = swa_ratio;
  o.max_running = max_running;
  o.speculative = speculative;
  o.page_size = page;
  return o;
}

kvs_sglang_pools compute(const kvs_sglang_model &m, const kvs_sglang_options &o,
                         uint64_t available) {
  kvs_sglang_pools p{};
  kvs_error err;
  EXPECT_EQ(kvs_sglang_pools_compute(&m, &o, available, &p, &err), KVS_OK) << err.message;
  return p;
}

// The bytes of a value, to show a failed call left it alone.
template <typename T>
std::string bytes_of(const T &value) {
  return std::string(reinterpret_cast<const char *>(&value), sizeof value);
}

// A refusal: the status, a message naming `field`, *out untouched.
void expect_refused(const kvs_sglang_model &m, const kvs_sglang_options &o, uint64_t available,
                    kvs_status status, const char *field) {
  kvs_sglang_pools out;
  std::memset(&out, 0x5a, sizeof out);
  const std::string before = bytes_of(out);
  kvs_error err;
  EXPECT_EQ(kvs_sglang_pools_compute(&m, &o, available, &out, &err), status);
  EXPECT_EQ(err.status, status);
  EXPECT_NE(std::string(err.message).find(field), std::string::npos)
      << "message does not name " << field << ": " << err.message;
  EXPECT_EQ(bytes_of(out), before) << "out was written on failure";
}

// ---------------------------------------------------------------- model --

TEST(SglangModel, FlashAndProCountTheirLayers) {
  kvs_sglang_model f = flash();
  EXPECT_EQ(f.qk_nope_head_dim, 448u);  // 512 - 64
  EXPECT_EQ(f.qk_rope_head_dim, 64u);
  EXPECT_EQ(f.index_head_dim, 128u);
  EXPECT_EQ(f.swa_page_size, 128u);
  EXPECT_EQ(f.context_len, kContext);
  EXPECT_EQ(f.n_layers, 43u);  // the 44th ratio is the MTP layer: not read
  EXPECT_EQ(f.n_c4, 21u);
  EXPECT_EQ(f.n_c128, 20u);  // and 2 window-only layers

  kvs_sglang_model p = pro();
  EXPECT_EQ(p.n_layers, 61u);
  EXPECT_EQ(p.n_c4, 30u);
  EXPECT_EQ(p.n_c128, 31u);
}

TEST(SglangModel, StageRangeCountsOnlyItsLayers) {
  // Pro's schedule is 128, 128, then 4 on even and 128 on odd layers.
  // Layers [0, 15): 0, 1 and the odd 3..13 (6) are ratio 128 -> 8; the
  // even 2..14 are ratio 4 -> 7.
  kvs_geometry g = builtin("dsv4-pro");
  kvs_sglang_model m = model_of(g, 0, 15);
  EXPECT_EQ(m.n_layers, 15u);
  EXPECT_EQ(m.n_c4, 7u);
  EXPECT_EQ(m.n_c128, 8u);
  // Layers [45, 61): even 46..60 (8) ratio 4, odd 45..59 (8) ratio 128.
  m = model_of(g, 45, 61);
  EXPECT_EQ(m.n_layers, 16u);
  EXPECT_EQ(m.n_c4, 8u);
  EXPECT_EQ(m.n_c128, 8u);
}

void expect_model_refused(const kvs_geometry *g, size_t first, size_t end, uint64_t rope,
                          uint64_t window, const char *field) {
  kvs_sglang_model out;
  std::memset(&out, 0x5a, sizeof out);
  const std::string before = bytes_of(out);
  kvs_error err;
  EXPECT_EQ(kvs_sglang_model_make(g, first, end, rope, window, kContext, &out, &err),
            KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find(field), std::string::npos)
      << "message does not name " << field << ": " << err.message;
  EXPECT_EQ(bytes_of(out), before);
}

TEST(SglangModel, Refusals) {
  kvs_geometry g = builtin("dsv4-flash");
  expect_model_refused(&g, 0, 43, 512, kWindow, "qk_rope_head_dim");  // == head_dim
  expect_model_refused(&g, 0, 43, 600, kWindow, "qk_rope_head_dim");  // > head_dim
  expect_model_refused(&g, 0, 43, 0, kWindow, "qk_rope_head_dim");
  expect_model_refused(&g, 0, 43, kRope, 0, "sliding_window");
  expect_model_refused(&g, 5, 5, kRope, kWindow, "first");  // empty
  expect_model_refused(&g, 6, 5, kRope, kWindow, "first");  // reversed
  expect_model_refused(&g, 0, 44, kRope, kWindow, "end");   // past the used layers
  expect_model_refused(nullptr, 0, 1, kRope, kWindow, "geometry");
  kvs_geometry bad = g;
  bad.head_dim = 0;
  expect_model_refused(&bad, 0, 43, kRope, kWindow, "head_dim");
}

// ------------------------------------------------------ per-token bytes --

// The per-token terms of the model, summed in long double: an independent
// evaluation, good to ~1e-18, for comparing with SGLang's double order.
long double per_token_long(long double swa, long double layers, long double n4, long double n128,
                           long double c4_ring) {
  const long double kv = 448 + 2 * 64 + 8;          // 584
  const long double indexer = 128 + 128 / 128 * 4;  // 132
  const long double ring_per_window = c4_ring / 128;
  return swa * kv * layers + kv * n4 / 4 + kv * n128 / 128 + indexer * n4 / 4 +
         swa * ring_per_window * (2 * 2 * 512 * 4) * n4 +
         swa * ring_per_window * (2 * 2 * 128 * 4) * n4;
}

TEST(SglangPerToken, RowsAndRings) {
  kvs_sglang_pools p = compute(flash(), options(0.1, 64), 100 * kGiB);
  EXPECT_EQ(p.kv_row_bytes, 584u);       // 448 fp8 + 64 x 2 bf16 + 8 scale bytes
  EXPECT_EQ(p.indexer_row_bytes, 132u);  // 128 fp8 + 128 / 128 x 4
  EXPECT_EQ(p.c4_ring_size, 8u);
  EXPECT_EQ(p.c128_ring_size, 128u);
  p = compute(flash(), options(0.1, 64, true), 100 * kGiB);
  EXPECT_EQ(p.c4_ring_size, 16u);
  EXPECT_EQ(p.c128_ring_size, 256u);
}

TEST(SglangPerToken, FlashPublishedFigure) {
  // 0.1 x 584 x 43          = 2511.2   window rows on every layer
  // 0.25 x 584 x 21         = 3066     ratio-4 rows
  // 1/128 x 584 x 20        =   91.25  ratio-128 rows
  // 0.25 x 132 x 21         =  693     indexer rows
  // 0.1 x 8/128 x 8192 x 21 = 1075.2   ratio-4 state ring (2x2x512 fp32)
  // 0.1 x 8/128 x 2048 x 21 =  268.8   ratio-4 indexer ring (2x2x128 fp32)
  //                   total = 7705.45  (SGLang logs "7705.45")
  kvs_sglang_pools p = compute(flash(), options(0.1, 64), 100 * kGiB);
  EXPECT_NEAR(p.bytes_per_full_token, 7705.45, 7705.45 * 1e-9);
  EXPECT_NEAR((long double)p.bytes_per_full_token, per_token_long(0.1L, 43, 21, 20, 8),
              7705.45L * 1e-12L);
  // Python's double order lands one ulp above the double nearest 7705.45:
  // it prints 7705.450000000001.
  EXPECT_EQ(p.bytes_per_full_token, 0x1.e197333333334p+12);
  EXPECT_EQ(std::nextafter(7705.45, 1e9), 0x1.e197333333334p+12);
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", p.bytes_per_full_token);
  EXPECT_STREQ(text, "7705.45");
}

TEST(SglangPerToken, ProPublishedFigure) {
  // 0.15 x 584 x 61          = 5343.6
  // 0.25 x 584 x 30          = 4380
  // 1/128 x 584 x 31         =  141.4375
  // 0.25 x 132 x 30          =  990
  // 0.15 x 8/128 x 8192 x 30 = 2304
  // 0.15 x 8/128 x 2048 x 30 =  576
  //                    total = 13735.0375 (SGLang logs "13735.04")
  kvs_sglang_pools p = compute(pro(), options(0.15, 64), 100 * kGiB);
  EXPECT_NEAR(p.bytes_per_full_token, 13735.0375, 13735.0375 * 1e-9);
  EXPECT_NEAR((long double)p.bytes_per_full_token, per_token_long(0.15L, 61, 30, 31, 8),
              13735.0375L * 1e-12L);
  // SGLang's order gives the double one ulp below the one nearest
  // 13735.0375 (Python prints 13735.037499999999).
  EXPECT_EQ(p.bytes_per_full_token, 0x1.ad384ccccccccp+13);
  EXPECT_EQ(std::nextafter(13735.0375, 0.0), 0x1.ad384ccccccccp+13);
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", p.bytes_per_full_token);
  EXPECT_STREQ(text, "13735.04");
}

TEST(SglangPerToken, SpeculativeDoublesTheC4RingAndAddsADraftLayer) {
  // Rings of 16: the two state terms double, 2304 + 576 -> 4608 + 1152,
  // so the sum is 13735.0375 + 2880 = 16615.0375, times 62 / 61.
  kvs_sglang_pools p = compute(pro(), options(0.15, 32, true), 40 * kGiB);
  const long double expected = per_token_long(0.15L, 61, 30, 31, 16) * 62 / 61;
  EXPECT_NEAR((long double)p.bytes_per_full_token, expected, expected * 1e-12L);
  EXPECT_NEAR(p.bytes_per_full_token, 16887.415163934, 1e-8);
}

// ----------------------------------------------------------- pool sizes --

TEST(SglangPools, Flash100GiBMaxRunning64) {
  // Reservation: 65 slots x 128 = 8320 rows + 128 + 1 = 8449, up to 8576
  // (67 x 128); x (2 x 512 x 4 = 4096 B) x 20 ratio-128 layers
  // = 702,545,920 B.
  // Tokens: (107,374,182,400 - 702,545,920) / 7705.45 = 13,843,660.85
  // -> full 13,843,456 (54,076 pages of 256);
  // swa: int(1,384,345.6) = 1,384,345 -> 1,384,192 (5,407 pages);
  // c4 = full / 4, c128 = full / 128, c4_state = 1,384,192 / 128 x 8,
  // c128_state = 65 x 128.
  kvs_sglang_pools p = compute(flash(), options(0.1, 64), 100 * kGiB);
  EXPECT_EQ(p.c128_state_fixed_bytes, 702545920u);
  EXPECT_EQ(p.max_running, 64u);
  EXPECT_FALSE(p.max_running_estimated);
  const long double tokens = (100.0L * kGiB - 702545920.0L) / 7705.45L;
  EXPECT_EQ((uint64_t)tokens, 13843660u);
  EXPECT_GT(tokens - 13843660, 0.8L);  // far from a boundary
  EXPECT_EQ(p.full, 13843456u);
  EXPECT_EQ(p.full, 54076u * 256);
  EXPECT_EQ(p.swa, 1384192u);
  EXPECT_EQ(p.c4, 3460864u);
  EXPECT_EQ(p.c128, 108152u);
  EXPECT_EQ(p.c4_state, 86512u);  // 10,814 x 8
  EXPECT_EQ(p.c128_state, 8320u);
  EXPECT_FALSE(p.no_pool);
  EXPECT_FALSE(p.swa_below_window_plus_page);
}

TEST(SglangPools, FlashNpuPageOf128) {
  // Same tokens as above, floored to 128: 13,843,660 -> 13,843,584;
  // swa int(1,384,358.4) = 1,384,358 -> 1,384,320.
  kvs_sglang_pools p = compute(flash(), options(0.1, 64, false, KVS_SGLANG_NPU_PAGE), 100 * kGiB);
  EXPECT_EQ(p.full, 13843584u);
  EXPECT_EQ(p.swa, 1384320u);
  EXPECT_EQ(p.c4, 3460896u);
  EXPECT_EQ(p.c128, 108153u);
  EXPECT_EQ(p.c4_state, 86520u);  // 10,815 x 8
}

TEST(SglangPools, Pro40GiBSpeculative) {
  // Reservation: 33 slots x 256 = 8448 + 256 + 1 = 8705, up to 8832
  // (69 x 128); x 4096 B x 31 layers = 1,121,452,032 B.
  // Tokens: (42,949,672,960 - 1,121,452,032) / 16,887.4151... = 2,476,887.1
  // -> full 2,476,800 (9,675 pages); swa int(371,520) -> 371,456 (1,451
  // pages); c4_state 371,456 / 128 = 2,902 x 16; c128_state 33 x 256.
  kvs_sglang_pools p = compute(pro(), options(0.15, 32, true), 40 * kGiB);
  EXPECT_EQ(p.c128_state_fixed_bytes, 1121452032u);
  const long double per_token = per_token_long(0.15L, 61, 30, 31, 16) * 62 / 61;
  const long double tokens = (40.0L * kGiB - 1121452032.0L) / per_token;
  EXPECT_EQ((uint64_t)tokens, 2476887u);
  EXPECT_EQ(p.full, 2476800u);
  EXPECT_EQ(p.swa, 371456u);
  EXPECT_EQ(p.c4, 619200u);
  EXPECT_EQ(p.c128, 19350u);
  EXPECT_EQ(p.c4_state, 46432u);
  EXPECT_EQ(p.c128_state, 8448u);
  EXPECT_FALSE(p.no_pool);
}

TEST(SglangPools, EstimatedMaxRunningInsideTheClamp) {
  // Capacity before the reservation: 64,424,509,440 / 7705.45 = 8,360,901
  // tokens; 8,360,901 / 1,048,576 x 512 = 4082.47 -> 4082 requests, within
  // [2048, 4096] and far below half the tokens.
  // Reservation: 4083 x 128 + 129 = 522,753 rows, up to 522,880 (4085 x
  // 128); x 4096 x 20 = 42,834,329,600 B.
  // Tokens: 21,590,179,840 / 7705.45 = 2,801,936.3 -> full 2,801,920;
  // swa int(280,192) -> 280,064; c4_state 2,188 x 8.
  kvs_sglang_pools p = compute(flash(), options(0.1, 0), 60 * kGiB);
  EXPECT_TRUE(p.max_running_estimated);
  EXPECT_EQ((uint64_t)(60.0L * kGiB / 7705.45L), 8360901u);
  EXPECT_EQ(p.max_running, 4082u);
  EXPECT_EQ(p.c128_state_fixed_bytes, 42834329600u);
  EXPECT_EQ(p.full, 2801920u);
  EXPECT_EQ(p.swa, 280064u);
  EXPECT_EQ(p.c4, 700480u);
  EXPECT_EQ(p.c128, 21890u);
  EXPECT_EQ(p.c4_state, 17504u);
  EXPECT_EQ(p.c128_state, 4083u * 128);
}

TEST(SglangPools, EstimatedMaxRunningClampedTo4096) {
  // 85,899,345,920 / 7705.45 = 11,147,868 tokens -> 5443.29, clamped to 4096.
  // Reservation: 4097 x 128 + 129 = 524,545, up to 524,672 rows
  // = 42,981,130,240 B, 20 GiB more than 2048 requests would take.
  // Tokens: 42,918,215,680 / 7705.45 = 5,569,851.9 -> full 5,569,792.
  kvs_sglang_pools p = compute(flash(), options(0.1, 0), 80 * kGiB);
  EXPECT_TRUE(p.max_running_estimated);
  EXPECT_EQ(p.max_running, 4096u);
  EXPECT_EQ(p.c128_state_fixed_bytes, 42981130240u);
  EXPECT_EQ(p.full, 5569792u);
  EXPECT_EQ(p.swa, 556800u);  // int(556,979.2) floored to 2,175 pages
  EXPECT_EQ(p.c128_state, 4097u * 128);
}

TEST(SglangPools, EstimatedMaxRunningRaisedTo2048) {
  // 26,843,545,600 / 7705.45 = 3,483,709 tokens -> 1701.03, raised to 2048
  // (still below 3,483,709 / 2).
  // Reservation: 2049 x 128 + 129 = 262,401, up to 262,528 rows
  // = 21,506,293,760 B. Tokens: 5,337,251,840 / 7705.45 = 692,659.3 ->
  // full 692,480; swa int(69,248) -> 69,120.
  kvs_sglang_pools p = compute(flash(), options(0.1, 0), 25 * kGiB);
  EXPECT_EQ(p.max_running, 2048u);
  EXPECT_EQ(p.c128_state_fixed_bytes, 21506293760u);
  EXPECT_EQ(p.full, 692480u);
  EXPECT_EQ(p.swa, 69120u);
  EXPECT_EQ(p.c4_state, 4320u);  // 540 x 8
}

TEST(SglangPools, EstimateRaisedThenCutToHalfTheTokens) {
  // 20,000,000 B / 7705.45 = 2595 tokens: 2595 / 1,048,576 x 512 = 1.27
  // -> 1, raised to 2048, then cut to 2595 // 2 = 1297. Both bounds bind.
  // Reservation: 1298 x 128 + 129 = 166,273, up to 166,400 rows x 4096 x
  // 20 = 13,631,488,000 B: more than the budget, so no pool at all.
  kvs_sglang_pools p = compute(flash(), options(0.1, 0), 20000000);
  EXPECT_TRUE(p.max_running_estimated);
  EXPECT_EQ(p.max_running, 1297u);
  EXPECT_EQ(p.c128_state_fixed_bytes, 13631488000u);
  EXPECT_EQ(p.full, 0u);
  EXPECT_EQ(p.swa, 0u);
  EXPECT_EQ(p.c4, 0u);
  EXPECT_EQ(p.c4_state, 0u);
  EXPECT_EQ(p.c128_state, 1298u * 128);
  EXPECT_TRUE(p.no_pool);
  EXPECT_TRUE(p.swa_below_window_plus_page);
}

TEST(SglangPools, BudgetBelowTheReservationIsNoPool) {
  // Pro with 1024 requests: 1025 x 128 + 129 = 131,329, up to 131,456
  // rows x 4096 x 31 = 16,691,757,056 B, beyond 1 GiB: nothing is left.
  kvs_sglang_pools p = compute(pro(), options(0.1, 1024), kGiB);
  EXPECT_EQ(p.c128_state_fixed_bytes, 16691757056u);
  EXPECT_EQ(p.full, 0u);
  EXPECT_TRUE(p.no_pool);
  EXPECT_TRUE(p.swa_below_window_plus_page);
}

TEST(SglangPools, TinyWindowPoolIsFlagged) {
  // swa_ratio 0.001: per token 25.112 + 3066 + 91.25 + 693 + 10.752 + 2.688
  // = 3888.802. Reservation for 1 request: 2 x 128 + 129 = 385 -> 512 rows
  // x 4096 x 20 = 41,943,040 B. Tokens: 1,031,798,784 / 3888.802
  // = 265,325.6 -> full 265,216; swa int(265.216) = 265 -> 256, which is
  // not above window 128 + page 256.
  kvs_sglang_pools p = compute(flash(), options(0.001, 1), kGiB);
  EXPECT_NEAR(p.bytes_per_full_token, 3888.802, 1e-9);
  EXPECT_EQ(p.c128_state_fixed_bytes, 41943040u);
  EXPECT_EQ(p.full, 265216u);
  EXPECT_EQ(p.swa, 256u);
  EXPECT_EQ(p.c4_state, 16u);
  EXPECT_FALSE(p.no_pool);
  EXPECT_TRUE(p.swa_below_window_plus_page);
  // Twice the ratio: 3927.354 per token, full 262,656, swa int(525.3) ->
  // 512 > 384: not flagged.
  p = compute(flash(), options(0.002, 1), kGiB);
  EXPECT_EQ(p.full, 262656u);
  EXPECT_EQ(p.swa, 512u);
  EXPECT_FALSE(p.swa_below_window_plus_page);
}

TEST(SglangPools, PipelineStage) {
  // Pro, stage 0 of 4: layers [0, 15), 7 ratio-4 and 8 ratio-128.
  // Per token: 876 + 1022 + 36.5 + 231 + 358.4 + 89.6 = 2613.5.
  // Reservation: 8576 rows x 4096 x 8 = 281,018,368 B. Tokens:
  // 10,456,399,872 / 2613.5 = 4,000,918.3 -> full 4,000,768.
  size_t first = 0, end = 0;
  ASSERT_EQ(kvs_sglang_pp_range(61, 4, 0, &first, &end, nullptr), KVS_OK);
  kvs_geometry g = builtin("dsv4-pro");
  kvs_sglang_pools p = compute(model_of(g, first, end), options(0.1, 64), 10 * kGiB);
  EXPECT_NEAR(p.bytes_per_full_token, 2613.5, 1e-9);
  EXPECT_EQ(p.c128_state_fixed_bytes, 281018368u);
  EXPECT_EQ(p.full, 4000768u);
  EXPECT_EQ(p.swa, 399872u);  // int(400,076.8) -> 1,562 pages
}

TEST(SglangPools, NoRatio128LayersReservesNothing) {
  // Two window-only layers, context unknown: with max_running given the
  // estimate (which divides by context_len) is never taken.
  kvs_geometry g = builtin("dsv4-flash");
  kvs_sglang_model m{};
  ASSERT_EQ(kvs_sglang_model_make(&g, 0, 2, kRope, kWindow, 0, &m, nullptr), KVS_OK);
  EXPECT_EQ(m.n_c4 + m.n_c128, 0u);
  // 0.1 x 584 x 2 = 116.8 per token; 10 GiB / 116.8 = 91,929,950.7 ->
  // full 91,929,856.
  kvs_sglang_pools p = compute(m, options(0.1, 64), 10 * kGiB);
  EXPECT_EQ(p.c128_state_fixed_bytes, 0u);
  EXPECT_EQ(p.full, 91929856u);
  EXPECT_EQ(p.c128_state, 65u * 128);  // finalised regardless
  expect_refused(m, options(0.1, 0), 10 * kGiB, KVS_ERR_INVALID_ARGUMENT, "context_len");
}

TEST(SglangPools, HugeContextTakesTheExactQuotientPath) {
  // context_len above 2^53: Python's int / int is rounded once from the
  // exact rational, which the code forms in 128-bit integers. The
  // quotient is ~1e-11 here, so the estimate is 2048 either way.
  kvs_sglang_model m = flash();
  m.context_len = (1ull << 60) + 1;
  kvs_sglang_pools p = compute(m, options(0.1, 0), 60 * kGiB);
  EXPECT_EQ(p.max_running, 2048u);
  EXPECT_EQ(p.c128_state_fixed_bytes, 21506293760u);
}

// ------------------------------------------------------------ refusals --

TEST(SglangPools, Refusals) {
  const kvs_sglang_model f = flash();
  expect_refused(f, options(0.1, 64, false, 0), kGiB, KVS_ERR_INVALID_ARGUMENT, "page_size");
  expect_refused(f, options(0.1, 64, false, 100), kGiB, KVS_ERR_INVALID_ARGUMENT, "page_size");
  expect_refused(f, options(0.1, 64, false, 192), kGiB, KVS_ERR_INVALID_ARGUMENT, "page_size");
  expect_refused(f, options(0.0, 64), kGiB, KVS_ERR_INVALID_ARGUMENT, "swa_ratio");
  expect_refused(f, options(-0.1, 64), kGiB, KVS_ERR_INVALID_ARGUMENT, "swa_ratio");
  expect_refused(f, options(NAN, 64), kGiB, KVS_ERR_INVALID_ARGUMENT, "swa_ratio");
  expect_refused(f, options(INFINITY, 64), kGiB, KVS_ERR_INVALID_ARGUMENT, "swa_ratio");
  kvs_sglang_model no_context = f;
  no_context.context_len = 0;
  expect_refused(no_context, options(0.1, 0), kGiB, KVS_ERR_INVALID_ARGUMENT, "context_len");
  kvs_sglang_model empty = f;
  empty.n_layers = 0;
  expect_refused(empty, options(0.1, 64), kGiB, KVS_ERR_INVALID_ARGUMENT, "n_layers");
  kvs_sglang_model no_window = f;
  no_window.swa_page_size = 0;
  expect_refused(no_window, options(0.1, 64), kGiB, KVS_ERR_INVALID_ARGUMENT, "swa_page_size");
  kvs_sglang_model too_many = f;
  too_many.n_c4 = 40;  // 40 + 20 > 43
  expect_refused(too_many, options(0.1, 64), kGiB, KVS_ERR_INVALID_ARGUMENT, "n_c4");
}

TEST(SglangPools, OverflowIsRefusedNotWrapped) {
  const kvs_sglang_model f = flash();
  // (2^62 + 1) x 128 rows does not fit in 64 bits.
  expect_refused(f, options(0.1, 1ull << 62), UINT64_MAX, KVS_ERR_OVERFLOW, "max_running");
  // One window-only layer at a vanishing ratio: 2^64 - 1 B / 5.84e-14 B
  // per token is ~3e32 tokens.
  kvs_sglang_model window_only = f;
  window_only.n_layers = 1;
  window_only.n_c4 = 0;
  window_only.n_c128 = 0;
  expect_refused(window_only, options(1e-16, 64), UINT64_MAX, KVS_ERR_OVERFLOW, "swa_ratio");
  // A ratio so large that a product is infinite: inf x 0 ratio-4 layers is
  // NaN, where Python's int() would fail.
  expect_refused(window_only, options(1e308, 64), kGiB, KVS_ERR_OVERFLOW, "swa_ratio");
}

TEST(SglangPools, NullArguments) {
  const kvs_sglang_model f = flash();
  const kvs_sglang_options o = options(0.1, 64);
  kvs_sglang_pools p;
  EXPECT_EQ(kvs_sglang_pools_compute(nullptr, &o, kGiB, &p, nullptr), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_sglang_pools_compute(&f, nullptr, kGiB, &p, nullptr), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvs_sglang_pools_compute(&f, &o, kGiB, nullptr, nullptr), KVS_ERR_INVALID_ARGUMENT);
}

// ------------------------------------------------------------ pp ranges --

struct Range {
  size_t first, end;
};

std::vector<Range> stages(size_t layers, size_t pp) {
  std::vector<Range> out;
  for (size_t stage = 0; stage < pp; stage++) {
    Range r{99, 99};
    kvs_error err;
    EXPECT_EQ(kvs_sglang_pp_range(layers, pp, stage, &r.first, &r.end, &err), KVS_OK)
        << err.message;
    out.push_back(r);
  }
  return out;
}

void expect_split(size_t layers, size_t pp, const std::vector<size_t> &sizes) {
  std::vector<Range> got = stages(layers, pp);
  ASSERT_EQ(got.size(), sizes.size());
  size_t next = 0;
  for (size_t i = 0; i < got.size(); i++) {
    EXPECT_EQ(got[i].first, next) << "stage " << i << " is not contiguous";
    EXPECT_EQ(got[i].end - got[i].first, sizes[i]) << "stage " << i;
    next = got[i].end;
  }
  EXPECT_EQ(next, layers);
}

TEST(SglangPpRange, RemainderGoesToTheLastStages) {
  // SGLang: layers // pp each, and the last (layers % pp) stages one more.
  expect_split(61, 1, {61});
  expect_split(61, 2, {30, 31});                     // 61 = 2 x 30 + 1
  expect_split(61, 4, {15, 15, 15, 16});             // 61 = 4 x 15 + 1
  expect_split(61, 8, {7, 7, 7, 8, 8, 8, 8, 8});     // 61 = 8 x 7 + 5
  expect_split(43, 3, {14, 14, 15});                 // 43 = 3 x 14 + 1
  expect_split(43, 43, std::vector<size_t>(43, 1));  // one each
  expect_split(64, 4, {16, 16, 16, 16});
  // Exact ranges for the DeepSeek 61 x 8 case.
  std::vector<Range> r = stages(61, 8);
  EXPECT_EQ(r[2].first, 14u);
  EXPECT_EQ(r[2].end, 21u);
  EXPECT_EQ(r[3].first, 21u);
  EXPECT_EQ(r[3].end, 29u);
  EXPECT_EQ(r[7].first, 53u);
  EXPECT_EQ(r[7].end, 61u);
}

void expect_pp_refused(size_t layers, size_t pp, size_t stage, const char *field) {
  size_t first = 7, end = 9;
  kvs_error err;
  EXPECT_EQ(kvs_sglang_pp_range(layers, pp, stage, &first, &end, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find(field), std::string::npos)
      << "message does not name " << field << ": " << err.message;
  EXPECT_EQ(first, 7u);
  EXPECT_EQ(end, 9u);
}

TEST(SglangPpRange, Refusals) {
  expect_pp_refused(61, 0, 0, "pp");
  expect_pp_refused(61, 62, 0, "pp");
  expect_pp_refused(0, 1, 0, "n_layers");
  expect_pp_refused(61, 4, 4, "stage");
  size_t first;
  EXPECT_EQ(kvs_sglang_pp_range(61, 4, 0, &first, nullptr, nullptr), KVS_ERR_INVALID_ARGUMENT);
}

}  // namespace
