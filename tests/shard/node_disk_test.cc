// The prefix cache's disk tier on the host twin (tests/shard/disk_node.h:
// nodes of the small model from flags, ranks as threads over loopback,
// each rank writing rows of its own into its pages):
//   - write-through and restart: cached blocks are written once each, one
//     file per block in each rank's folder; new nodes over the same folder
//     find them, agree on them, hit them and read them back into fresh
//     pages byte for byte on every rank;
//   - agreement: a block one rank lost is dropped by every rank;
//   - foreign blocks (another model name, KV dtype or page size) are
//     refused block by block with the reason, and left in place;
//   - a corrupt block fails its rank's step naming the chain, zeroes its
//     page and goes; the other rows are untouched;
//   - the flags a disk tier needs are refused one by one, naming the flag.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "shard/node.h"
#include "tests/shard/disk_node.h"
#include "tests/shard/ranks.h"

using kvs_test::DiskSetup;

namespace {

constexpr size_t kBlocks = 4;

// A test's folder: the small model's config and the disk tier's folder.
struct Folder {
  std::string root, config, disk;
  Folder() {
    root = kvs_test::fresh_dir("disk");
    EXPECT_FALSE(root.empty());
    config = kvs_test::small_config(root);
    EXPECT_FALSE(config.empty());
    disk = root + "/disk";
  }
  ~Folder() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  DiskSetup setup(int tp) const {
    DiskSetup s;
    s.config = config;
    s.path = disk;
    s.tp = tp;
    return s;
  }
};

// The prompt every test caches: kBlocks blocks, keys 11, 12, ...; then a
// key past them (a prompt reaching one page further than the blocks).
std::vector<uint64_t> prompt_keys() { return {11, 12, 13, 14, 99}; }
std::vector<uint64_t> block_keys() { return {11, 12, 13, 14}; }
std::vector<int64_t> first_pages() { return {2, 3, 4, 5}; }
std::vector<int64_t> fetch_pages() { return {8, 9, 10, 11}; }
std::vector<uint64_t> seeds() { return {101, 102, 103, 104}; }

// What one rank saw, gathered after its thread ends.
struct RankView {
  kvs_node_prefix_counts counts{};
  std::vector<std::string> files;    // its folder's block files
  std::vector<std::string> want;     // the files of the blocks it cached, sorted
  std::vector<std::string> ordered;  // ... in the prompt's order
  uint64_t digest = 0;
};

// One rank of the first life: caches the prompt, steps until every block
// is written, checks its folder, and checks a second insert of the same
// blocks (after they left the GPU index) writes nothing.
void first_life(const DiskSetup &s, kvs_comm_t comm, std::vector<RankView> *views) {
  kvs_node_t node = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_test::create_from(comm, kvs_test::disk_flags(s), &node, &err), KVS_OK)
      << err.message;
  const int rank = kvs_node_rank(node);
  const std::string dir = kvs_test::rank_dir(s.path, rank);
  kvs_node_prefix_counts c = kvs_test::counts_of(node);
  EXPECT_GE(c.disk_slots, 2 * kBlocks);
  EXPECT_EQ(c.disk_found, 0u);
  EXPECT_EQ(c.disk_agreed, 0u);
  kvs_test::cache_prompt(node, 1, first_pages(), block_keys(), seeds());
  kvs_test::step_until_stored(node, kBlocks);
  RankView &v = (*views)[static_cast<size_t>(rank)];
  for (int64_t page : first_pages()) {
    v.ordered.push_back(kvs_test::block_file(kvs_test::chain_at(node, page)));
  }
  v.want = v.ordered;
  std::sort(v.want.begin(), v.want.end());
  c = kvs_test::counts_of(node);
  EXPECT_EQ(c.stores, kBlocks) << "rank " << rank;
  EXPECT_EQ(c.disk_blocks, kBlocks);
  EXPECT_EQ(c.disk_failures, 0u);
  EXPECT_EQ(kvs_test::files_in(dir, ".kvb"), v.want)
      << "rank " << rank << "'s folder holds its blocks";
  EXPECT_TRUE(kvs_test::files_in(dir, "").size() == kBlocks + 3)
      << "the blocks, the store's lock, . and ..: nothing else";
  // Written once: the blocks leave the GPU index and are cached again.
  kvs_test::evict_all(node);
  kvs_test::cache_prompt(node, 2, fetch_pages(), block_keys(), seeds());
  for (int i = 0; i < 2; i++) kvs_test::step(node);
  c = kvs_test::counts_of(node);
  EXPECT_EQ(c.blocks, kBlocks);
  EXPECT_EQ(c.stores, kBlocks) << "a block the tier holds is not written again";
  EXPECT_EQ(kvs_test::files_in(dir, ".kvb"), v.want);
  EXPECT_EQ(kvs_node_check(node, nullptr, &err), KVS_OK) << err.message;
  v.counts = c;
  kvs_node_destroy(node);
}

// One rank of a life after a restart: the counts at creation, then the
// prompt fetched into fresh pages (junk first) and stepped; check gets the
// step's status and error and the leader's hit. fiddle (may be empty) runs
// on this rank after creation, before the fetch.
void after_restart(const DiskSetup &s, kvs_comm_t comm, std::vector<RankView> *views,
                   const std::function<void(kvs_node_t)> &fiddle,
                   const std::function<void(kvs_node_t, kvs_status, const kvs_error &,
                                            const kvs_node_prefix_hit &)> &check) {
  kvs_node_t node = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_test::create_from(comm, kvs_test::disk_flags(s), &node, &err), KVS_OK)
      << err.message;
  const int rank = kvs_node_rank(node);
  RankView &v = (*views)[static_cast<size_t>(rank)];
  v.counts = kvs_test::counts_of(node);
  if (fiddle) fiddle(node);
  const kvs_test::NodeMemory m = kvs_test::host_memory();
  for (int64_t page : fetch_pages()) {
    std::vector<kvs_test::PageRows> rows = kvs_test::page_rows(node, static_cast<uint64_t>(page));
    kvs_test::put_rows(m, rows, kvs_test::pattern(rows, 7777, rank));
  }
  kvs_node_prefix_hit hit{};
  hit.size = sizeof hit;
  if (kvs_node_is_leader(node)) {
    kvs_test::fetch_prompt(node, 3, prompt_keys(), fetch_pages(), &hit);
  }
  kvs_node_step_result r{};
  r.size = sizeof r;
  kvs_error step_err;
  kvs_error_clear(&step_err);
  kvs_status stepped = kvs_node_step(node, nullptr, &r, &step_err);
  check(node, stepped, step_err, hit);
  v.files = kvs_test::files_in(kvs_test::rank_dir(s.path, rank), ".kvb");
  EXPECT_EQ(kvs_node_check(node, nullptr, &err), KVS_OK) << err.message;
  v.digest = kvs_test::counts_of(node).digest;
  kvs_node_destroy(node);
}

// Whether page `page` of this rank holds block i's rows.
bool holds_block(kvs_node_t node, int64_t page, size_t i) {
  return kvs_test::get_rows(kvs_test::host_memory(),
                            kvs_test::page_rows(node, static_cast<uint64_t>(page))) ==
         kvs_test::block_rows(node, seeds()[i]);
}

}  // namespace

TEST(NodeDisk, blocks_are_written_once_and_read_back_after_a_restart_on_every_rank) {
  for (int tp : {1, 2}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    Folder f;
    DiskSetup s = f.setup(tp);
    std::vector<RankView> first(static_cast<size_t>(tp)), second(static_cast<size_t>(tp));
    kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) { first_life(s, comm, &first); });
    if (HasFailure()) return;
    kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) {
      after_restart(s, comm, &second, nullptr,
                    [&](kvs_node_t node, kvs_status stepped, const kvs_error &err,
                        const kvs_node_prefix_hit &hit) {
                      ASSERT_EQ(stepped, KVS_OK) << err.message;
                      if (kvs_node_is_leader(node)) {
                        EXPECT_EQ(hit.host_pages, kBlocks);
                        EXPECT_EQ(hit.disk_pages, kBlocks);
                        EXPECT_EQ(hit.hit_tokens, kBlocks * kvs_node_page(node));
                      }
                      for (size_t i = 0; i < kBlocks; i++) {
                        EXPECT_TRUE(holds_block(node, fetch_pages()[i], i))
                            << "rank " << kvs_node_rank(node) << ": block " << i
                            << " is read back into page " << fetch_pages()[i];
                      }
                      kvs_node_prefix_counts c = kvs_test::counts_of(node);
                      EXPECT_EQ(c.loads, kBlocks);
                      EXPECT_EQ(c.stores, 0u) << "a block read back is not written again";
                      EXPECT_EQ(c.disk_failures, 0u);
                    });
    });
    for (int r = 0; r < tp; r++) {
      const RankView &v = second[static_cast<size_t>(r)];
      EXPECT_EQ(v.counts.disk_found, kBlocks) << "rank " << r;
      EXPECT_EQ(v.counts.disk_agreed, kBlocks) << "rank " << r;
      EXPECT_EQ(v.counts.disk_refused, 0u) << "rank " << r;
      EXPECT_EQ(v.counts.disk_blocks, kBlocks) << "rank " << r;
      EXPECT_EQ(v.files, first[static_cast<size_t>(r)].want) << "rank " << r;
      EXPECT_EQ(v.digest, second[0].digest) << "rank " << r << "'s index is the leader's";
    }
  }
}

TEST(NodeDisk, a_block_one_rank_lost_is_dropped_by_every_rank) {
  const int tp = 2;
  Folder f;
  DiskSetup s = f.setup(tp);
  std::vector<RankView> first(tp), second(tp);
  kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) { first_life(s, comm, &first); });
  if (HasFailure()) return;
  ASSERT_EQ(first[0].ordered, first[1].ordered) << "a block's file is named alike on every rank";
  // Rank 1 loses the third block.
  const std::string lost = first[1].ordered[2];
  ASSERT_EQ(unlink((kvs_test::rank_dir(s.path, 1) + "/" + lost).c_str()), 0);
  kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) {
    after_restart(s, comm, &second, nullptr,
                  [&](kvs_node_t node, kvs_status stepped, const kvs_error &err,
                      const kvs_node_prefix_hit &hit) {
                    ASSERT_EQ(stepped, KVS_OK) << err.message;
                    if (kvs_node_is_leader(node)) {
                      EXPECT_EQ(hit.host_pages, 2u) << "the hit ends before the lost block";
                      EXPECT_EQ(hit.disk_pages, 2u);
                    }
                    for (size_t i = 0; i < 2; i++) {
                      EXPECT_TRUE(holds_block(node, fetch_pages()[i], i))
                          << "rank " << kvs_node_rank(node) << ": block " << i;
                    }
                  });
  });
  std::vector<std::string> kept = first[0].ordered;
  kept.erase(kept.begin() + 2);
  std::sort(kept.begin(), kept.end());
  for (int r = 0; r < tp; r++) {
    const RankView &v = second[static_cast<size_t>(r)];
    EXPECT_EQ(v.counts.disk_found, r == 1 ? kBlocks - 1 : kBlocks) << "rank " << r;
    EXPECT_EQ(v.counts.disk_agreed, kBlocks - 1) << "rank " << r << " drops the lost block too";
    EXPECT_EQ(v.counts.disk_blocks, kBlocks - 1) << "rank " << r;
    EXPECT_EQ(v.counts.disk_refused, 0u) << "rank " << r;
    EXPECT_EQ(v.files, kept) << "rank " << r << "'s copy of the lost block goes too";
    EXPECT_EQ(v.digest, second[0].digest) << "rank " << r;
  }
}

TEST(NodeDisk, blocks_of_another_model_dtype_or_page_size_are_refused_one_by_one_and_kept) {
  const int tp = 2;
  Folder f;
  DiskSetup s = f.setup(tp);
  std::vector<RankView> first(tp);
  kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) { first_life(s, comm, &first); });
  if (HasFailure()) return;
  struct Other {
    const char *what;
    std::function<void(DiskSetup *)> change;
    std::vector<std::string> reason;  // what every refusal's line says
  };
  const std::vector<Other> others = {
      {"another model name",
       [](DiskSetup *o) { o->model = "another-model"; },
       {"model is small-disk", "needs another-model"}},
      {"bf16 rows", [](DiskSetup *o) { o->dtype = "bf16"; }, {"geometry is ", "needs "}},
      {"256-token pages", [](DiskSetup *o) { o->page = 256; }, {"page_size is 128", "needs 256"}},
  };
  for (const Other &other : others) {
    SCOPED_TRACE(other.what);
    DiskSetup o = f.setup(tp);
    other.change(&o);
    std::vector<RankView> second(tp);
    testing::internal::CaptureStderr();
    kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) {
      after_restart(o, comm, &second, nullptr,
                    [&](kvs_node_t, kvs_status stepped, const kvs_error &err,
                        const kvs_node_prefix_hit &hit) {
                      ASSERT_EQ(stepped, KVS_OK) << err.message;
                      EXPECT_EQ(hit.host_pages, 0u) << "nothing to hit";
                    });
    });
    const std::string said = testing::internal::GetCapturedStderr();
    for (int r = 0; r < tp; r++) {
      const RankView &v = second[static_cast<size_t>(r)];
      EXPECT_EQ(v.counts.disk_refused, kBlocks) << "rank " << r;
      EXPECT_EQ(v.counts.disk_found, 0u) << "rank " << r;
      EXPECT_EQ(v.counts.disk_agreed, 0u) << "rank " << r;
      EXPECT_EQ(v.files, first[static_cast<size_t>(r)].want)
          << "rank " << r << ": refused blocks are left in place";
      for (const std::string &name : first[static_cast<size_t>(r)].want) {
        const std::string hex = name.substr(0, name.size() - 4);
        const std::string head =
            "kvshard: rank " + std::to_string(r) + ": disk block " + hex + " refused: ";
        size_t at = said.find(head);
        ASSERT_NE(at, std::string::npos) << head << " in:\n" << said;
        const std::string line = said.substr(at, said.find('\n', at) - at);
        for (const std::string &word : other.reason) {
          EXPECT_NE(line.find(word), std::string::npos) << "'" << word << "' in: " << line;
        }
        if (r == 0 && name == first[0].want[0]) std::printf("%s: %s\n", other.what, line.c_str());
      }
    }
  }
  // The tier of the blocks' own kind finds every one again.
  std::vector<RankView> again(tp);
  kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) {
    after_restart(s, comm, &again, nullptr,
                  [&](kvs_node_t node, kvs_status stepped, const kvs_error &err,
                      const kvs_node_prefix_hit &) {
                    ASSERT_EQ(stepped, KVS_OK) << err.message;
                    for (size_t i = 0; i < kBlocks; i++) {
                      EXPECT_TRUE(holds_block(node, fetch_pages()[i], i))
                          << "rank " << kvs_node_rank(node) << ": block " << i;
                    }
                  });
  });
  for (int r = 0; r < tp; r++) {
    EXPECT_EQ(again[static_cast<size_t>(r)].counts.disk_agreed, kBlocks) << "rank " << r;
    EXPECT_EQ(again[static_cast<size_t>(r)].counts.disk_refused, 0u) << "rank " << r;
  }
}

TEST(NodeDisk, a_corrupt_block_fails_its_ranks_step_naming_it_zeroes_its_page_and_goes) {
  const int tp = 2;
  Folder f;
  DiskSetup s = f.setup(tp);
  std::vector<RankView> first(tp), second(tp);
  kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) { first_life(s, comm, &first); });
  if (HasFailure()) return;
  // After the restart agreed on every block: rank 0's third block is cut
  // short, a byte in the middle of rank 1's second block flips.
  const size_t bad[2] = {2, 1};
  kvs_test::run_ranks(tp, 20000, [&](int, kvs_comm_t comm) {
    after_restart(
        s, comm, &second,
        [&](kvs_node_t node) {
          const int r = kvs_node_rank(node);
          EXPECT_EQ(kvs_test::counts_of(node).disk_agreed, kBlocks);
          const std::string path =
              kvs_test::rank_dir(s.path, r) + "/" + first[static_cast<size_t>(r)].ordered[bad[r]];
          struct stat st;
          ASSERT_EQ(stat(path.c_str(), &st), 0);
          if (r == 0) {
            ASSERT_EQ(truncate(path.c_str(), st.st_size / 2), 0);
          } else {
            int fd = open(path.c_str(), O_RDWR);
            ASSERT_GE(fd, 0);
            char c = 0;
            ASSERT_EQ(pread(fd, &c, 1, st.st_size / 2), 1);
            c = static_cast<char>(c ^ 0x10);
            ASSERT_EQ(pwrite(fd, &c, 1, st.st_size / 2), 1);
            close(fd);
          }
        },
        [&](kvs_node_t node, kvs_status stepped, const kvs_error &err,
            const kvs_node_prefix_hit &) {
          const int r = kvs_node_rank(node);
          const std::string name = first[static_cast<size_t>(r)].ordered[bad[r]];
          EXPECT_EQ(stepped, KVS_ERR_CORRUPT) << "rank " << r;
          const std::string chain = name.substr(16, 16);
          EXPECT_NE(std::string(err.message).find("chain " + chain), std::string::npos)
              << "rank " << r << " names the block: " << err.message;
          const std::vector<kvs_test::PageRows> rows =
              kvs_test::page_rows(node, static_cast<uint64_t>(fetch_pages()[bad[r]]));
          size_t bytes = 0;
          for (const kvs_test::PageRows &row : rows) bytes += row.bytes;
          EXPECT_TRUE(kvs_test::get_rows(kvs_test::host_memory(), rows) ==
                      std::vector<char>(bytes, 0))
              << "rank " << r << ": the corrupt block's page is zeroed";
          for (size_t i = 0; i < kBlocks; i++) {
            if (i == bad[r]) continue;
            EXPECT_TRUE(holds_block(node, fetch_pages()[i], i))
                << "rank " << r << ": block " << i << " is read back all the same";
          }
          kvs_node_prefix_counts c = kvs_test::counts_of(node);
          EXPECT_EQ(c.disk_failures, 1u) << "rank " << r;
          EXPECT_EQ(c.loads, kBlocks);
        });
  });
  for (int r = 0; r < tp; r++) {
    std::vector<std::string> kept = first[static_cast<size_t>(r)].ordered;
    kept.erase(kept.begin() + static_cast<long>(bad[r]));
    std::sort(kept.begin(), kept.end());
    EXPECT_EQ(second[static_cast<size_t>(r)].files, kept)
        << "rank " << r << ": the corrupt block's file is gone, the others stay";
    EXPECT_EQ(second[static_cast<size_t>(r)].digest, second[0].digest);
  }
}

TEST(NodeDisk, a_block_swapped_for_a_foreign_one_after_the_agreement_is_corrupt_too) {
  Folder f, other;
  DiskSetup s = f.setup(1), o = other.setup(1);
  o.model = "another-model";
  std::vector<RankView> mine(1), theirs(1), second(1);
  kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) { first_life(s, comm, &mine); });
  kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) { first_life(o, comm, &theirs); });
  if (HasFailure()) return;
  ASSERT_EQ(mine[0].ordered, theirs[0].ordered) << "the same keys make the same chains";
  const std::string name = mine[0].ordered[0];
  kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
    after_restart(
        s, comm, &second,
        [&](kvs_node_t) {
          std::filesystem::copy_file(kvs_test::rank_dir(o.path, 0) + "/" + name,
                                     kvs_test::rank_dir(s.path, 0) + "/" + name,
                                     std::filesystem::copy_options::overwrite_existing);
        },
        [&](kvs_node_t node, kvs_status stepped, const kvs_error &err,
            const kvs_node_prefix_hit &) {
          EXPECT_EQ(stepped, KVS_ERR_CORRUPT) << err.message;
          std::printf("a foreign block swapped in: %s\n", err.message);
          EXPECT_NE(std::string(err.message).find("another-model"), std::string::npos)
              << err.message;
          for (size_t i = 1; i < kBlocks; i++) EXPECT_TRUE(holds_block(node, fetch_pages()[i], i));
        });
  });
  EXPECT_EQ(second[0].files.size(), kBlocks - 1) << "the foreign block goes";
}

namespace {

// The flags of s with `drop` left out (a prefix of the flag) and `add`
// added, tried on `tp` ranks: every rank's status and message (the same
// on every rank, checked).
std::pair<kvs_status, std::string> refused(const DiskSetup &s, const std::string &drop,
                                           const std::vector<std::string> &add, int tp = 1) {
  std::vector<std::string> flags;
  for (const std::string &flag : kvs_test::disk_flags(s)) {
    if (drop.empty() || flag.rfind(drop, 0) != 0) flags.push_back(flag);
  }
  flags.insert(flags.end(), add.begin(), add.end());
  std::vector<kvs_status> statuses(static_cast<size_t>(tp), KVS_OK);
  std::vector<std::string> messages(static_cast<size_t>(tp));
  kvs_test::run_ranks(tp, 20000, [&](int rank, kvs_comm_t comm) {
    kvs_node_t node = nullptr;
    kvs_error err;
    kvs_error_clear(&err);
    statuses[static_cast<size_t>(rank)] = kvs_test::create_from(comm, flags, &node, &err);
    messages[static_cast<size_t>(rank)] = err.message;
    EXPECT_EQ(node, nullptr);
    kvs_node_destroy(node);
  });
  for (int r = 1; r < tp; r++) {
    EXPECT_EQ(statuses[static_cast<size_t>(r)], statuses[0]) << "every rank fails alike";
    EXPECT_EQ(messages[static_cast<size_t>(r)], messages[0]);
  }
  return {statuses[0], messages[0]};
}

void expect_named(const std::pair<kvs_status, std::string> &got,
                  const std::vector<std::string> &words) {
  EXPECT_NE(got.first, KVS_OK);
  for (const std::string &w : words) {
    EXPECT_NE(got.second.find(w), std::string::npos) << "'" << w << "' in: " << got.second;
  }
  std::printf("refused: %s\n", got.second.c_str());
}

}  // namespace

TEST(NodeDisk, the_flags_a_disk_tier_needs_are_refused_naming_the_flag) {
  Folder f;
  const DiskSetup s = f.setup(1);
  expect_named(refused(s, "--disk-path=", {}),
               {"--disk-cache", "a disk tier needs its folder", "--disk-path"});
  expect_named(refused(s, "--prefix-cache", {}),
               {"--disk-cache", "needs the prefix cache", "--prefix-cache"});
  expect_named(refused(s, "--disk-cache=", {}),
               {"--disk-path is the disk tier's folder: give --disk-cache too"});
  expect_named(refused(s, "--disk-cache=", {"--disk-cache=0"}),
               {"--disk-cache needs a size above 0"});
  expect_named(refused(s, "--disk-model=", {"--disk-model="}),
               {"--disk-cache", "a disk tier needs the model's name", "--disk-model"});
  {  // --disk-model alone
    std::vector<std::string> flags;
    for (const std::string &flag : kvs_test::disk_flags(s)) {
      if (flag.rfind("--disk-cache=", 0) != 0 && flag.rfind("--disk-path=", 0) != 0)
        flags.push_back(flag);
    }
    kvs_test::run_ranks(1, 20000, [&](int, kvs_comm_t comm) {
      kvs_node_t node = nullptr;
      kvs_error err;
      EXPECT_EQ(kvs_test::create_from(comm, flags, &node, &err), KVS_ERR_PARSE);
      EXPECT_NE(std::string(err.message)
                    .find("--disk-model names what the disk tier's blocks are "
                          "signed with: give --disk-cache too"),
                std::string::npos)
          << err.message;
      kvs_node_destroy(node);
    });
  }
  expect_named(refused(s, "--disk-model=", {"--disk-model=tab\tbed"}),
               {"--disk-model", "printable"});
  // A regular file where the folder goes, and a folder nothing can be
  // made in (as root, whom permissions do not stop: /proc).
  const std::string file = f.root + "/a-file";
  FILE *out = std::fopen(file.c_str(), "w");
  ASSERT_NE(out, nullptr);
  std::fclose(out);
  expect_named(refused(s, "--disk-path=", {"--disk-path=" + file}), {"--disk-path", "a-file"});
  std::string locked = f.root + "/locked";
  ASSERT_EQ(mkdir(locked.c_str(), 0555), 0);
  if (access(locked.c_str(), W_OK) == 0) locked = "/proc";
  expect_named(refused(s, "--disk-path=", {"--disk-path=" + locked}), {"--disk-path", locked});
  // One rank's folder alone cannot be made: every rank fails, naming it.
  DiskSetup two = f.setup(2);
  two.path = f.root + "/two";
  ASSERT_EQ(mkdir(two.path.c_str(), 0755), 0);
  out = std::fopen((two.path + "/rank-1").c_str(), "w");
  ASSERT_NE(out, nullptr);
  std::fclose(out);
  expect_named(refused(two, "", {}, 2), {"rank 1", "--disk-path", "rank-1"});
  EXPECT_EQ(kvs_test::files_in(two.path + "/rank-0", ".kvb").size(), 0u);
}
