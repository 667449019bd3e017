// GPU discovery on every shipped topology: GPU count, bus ids in order,
// NUMA nodes, packages, cpusets and models; what is not a GPU; the
// bundled topology; loading errors; the live machine.
#include <gtest/gtest.h>
#include <hwloc.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/backends/cuda/gpu_gate.h"
#include "tests/topology/helpers.h"
#include "topology/gpu.h"

using namespace kvs_test;

namespace {

std::vector<std::string> busids(kvs_topology_t t) {
  std::vector<std::string> out;
  for (const kvs_gpu_info &g : gpus_of(t)) out.push_back(g.pci_busid);
  return out;
}

std::vector<int> numa_nodes(kvs_topology_t t) {
  std::vector<int> out;
  for (const kvs_gpu_info &g : gpus_of(t)) out.push_back(g.numa_node);
  return out;
}

std::vector<int> packages(kvs_topology_t t) {
  std::vector<int> out;
  for (const kvs_gpu_info &g : gpus_of(t)) out.push_back(g.package);
  return out;
}

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_indices_and_no_cuda(kvs_topology_t t) {
  EXPECT_FALSE(kvs_topology_is_this_system(t));
  EXPECT_FALSE(kvs_topology_cuda_used(t));
  EXPECT_NE(std::string(kvs_topology_cuda_note(t)).find("not this machine"), std::string::npos);
  for (size_t i = 0; i < kvs_topology_gpu_count(t); i++) {
    const kvs_gpu_info *g = kvs_topology_gpu(t, i);
    EXPECT_EQ(g->index, i);
    EXPECT_EQ(g->cuda_device, -1);
    EXPECT_TRUE(g->in_topology);
    EXPECT_EQ(g->vendor_id, KVS_PCI_VENDOR_NVIDIA);
    EXPECT_EQ(g->free_bytes, 0u);
  }
  EXPECT_EQ(kvs_topology_gpu(t, kvs_topology_gpu_count(t)), nullptr);
}

}  // namespace

TEST(Discovery, hgx_two_sockets_four_gpus_each) {
  Topology t = load_xml(kHgx);
  ASSERT_TRUE(t);
  EXPECT_EQ(kvs_topology_gpu_count(t.get()), 8u);
  EXPECT_EQ(busids(t.get()), (std::vector<std::string>{
                                 "0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0",
                                 "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"}));
  EXPECT_EQ(numa_nodes(t.get()), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(packages(t.get()), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(kvs_topology_numa_count(t.get()), 2u);
  EXPECT_EQ(kvs_topology_package_count(t.get()), 2u);
  EXPECT_STREQ(kvs_topology_gpu(t.get(), 0)->cpuset, "0-55,112-167");
  EXPECT_STREQ(kvs_topology_gpu(t.get(), 7)->cpuset, "56-111,168-223");
  EXPECT_STREQ(kvs_topology_gpu(t.get(), 3)->model, "GH100 [H200 SXM 141GB]");
  EXPECT_EQ(kvs_topology_gpu(t.get(), 3)->device_id, 0x2335u);
  expect_indices_and_no_cuda(t.get());
}

// The four NVSwitch chips are NVIDIA PCI functions of class 0x0680 and
// the BMC's VGA is a display of another vendor: neither is a GPU.
TEST(Discovery, nvswitch_and_bmc_vga_are_not_gpus) {
  Topology t = load_xml(kHgx);
  ASSERT_TRUE(t);
  for (const std::string &id : busids(t.get())) {
    EXPECT_NE(id, "0000:05:00.0");
    EXPECT_NE(id, "0000:02:00.0");
  }
  EXPECT_FALSE(kvs_pci_is_nvidia_gpu(0x10de, 0x0680));
  EXPECT_FALSE(kvs_pci_is_nvidia_gpu(0x1a03, 0x0300));
  EXPECT_TRUE(kvs_pci_is_nvidia_gpu(0x10de, 0x0302));
  EXPECT_TRUE(kvs_pci_is_nvidia_gpu(0x10de, 0x0300));
}

// One NUMA node per GPU pair, and bus order is not NUMA order: node 1
// owns the lowest buses, as on boards whose root complexes are numbered
// that way.
TEST(Discovery, epyc_one_numa_node_per_gpu_pair) {
  Topology t = load_xml(kEpyc);
  ASSERT_TRUE(t);
  EXPECT_EQ(kvs_topology_gpu_count(t.get()), 8u);
  EXPECT_EQ(busids(t.get()), (std::vector<std::string>{
                                 "0000:01:00.0", "0000:21:00.0", "0000:41:00.0", "0000:61:00.0",
                                 "0000:81:00.0", "0000:a1:00.0", "0000:c1:00.0", "0000:e1:00.0"}));
  EXPECT_EQ(numa_nodes(t.get()), (std::vector<int>{1, 1, 0, 0, 3, 3, 2, 2}));
  EXPECT_EQ(packages(t.get()), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(kvs_topology_numa_count(t.get()), 4u);
  EXPECT_STREQ(kvs_topology_gpu(t.get(), 0)->cpuset, "24-47,120-143");
  EXPECT_STREQ(kvs_topology_gpu(t.get(), 2)->cpuset, "0-23,96-119");
  EXPECT_STREQ(kvs_topology_gpu(t.get(), 5)->model, "GH100 [H100 NVL]");
  expect_indices_and_no_cuda(t.get());
}

TEST(Discovery, dgx2_sixteen_gpus_twelve_nvswitches_skipped) {
  Topology t = load_xml(kDgx2);
  ASSERT_TRUE(t);
  EXPECT_EQ(kvs_topology_gpu_count(t.get()), 16u);
  EXPECT_EQ(busids(t.get()), (std::vector<std::string>{
                                 "0000:34:00.0", "0000:36:00.0", "0000:39:00.0", "0000:3b:00.0",
                                 "0000:57:00.0", "0000:59:00.0", "0000:5c:00.0", "0000:5e:00.0",
                                 "0000:b7:00.0", "0000:b9:00.0", "0000:bc:00.0", "0000:be:00.0",
                                 "0000:e0:00.0", "0000:e2:00.0", "0000:e5:00.0", "0000:e7:00.0"}));
  EXPECT_EQ(numa_nodes(t.get()),
            (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}));
  // The NVML backend's OS device names the exact board.
  EXPECT_STREQ(kvs_topology_gpu(t.get(), 0)->model, "Tesla V100-SXM3-32GB-H");
  EXPECT_STREQ(kvs_topology_gpu(t.get(), 0)->cpuset, "0-1");
  EXPECT_STREQ(kvs_topology_gpu(t.get(), 15)->cpuset, "24-25");
  expect_indices_and_no_cuda(t.get());
}

// hwloc walks the tree depth first (06, 14, 11); the list is in bus order.
TEST(Discovery, two_socket_three_gpus_in_bus_order) {
  Topology t = load_xml(kTwoSocket3Gpu);
  ASSERT_TRUE(t);
  EXPECT_EQ(busids(t.get()),
            (std::vector<std::string>{"0000:06:00.0", "0000:11:00.0", "0000:14:00.0"}));
  EXPECT_EQ(numa_nodes(t.get()), (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(packages(t.get()), (std::vector<int>{0, 1, 1}));
  EXPECT_STREQ(kvs_topology_gpu(t.get(), 0)->model, "");  // no name in the export
  EXPECT_STREQ(kvs_topology_gpu(t.get(), 0)->cpuset, "0,2,4,6,8,10,12,14,16,18,20,22");
  expect_indices_and_no_cuda(t.get());
}

TEST(Discovery, bundled_topology_is_the_hgx_test_file) {
  EXPECT_EQ(std::string(kvs_bundled_topology_xml), read_file(data_path(kHgx)));
  kvs_topology_source source = kvs_topology_source_bundled();
  kvs_topology_t raw = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_topology_create(&source, nullptr, &raw, &err), KVS_OK) << err.message;
  Topology bundled(raw);
  Topology file = load_xml(kHgx);
  EXPECT_EQ(busids(bundled.get()), busids(file.get()));
  EXPECT_EQ(numa_nodes(bundled.get()), numa_nodes(file.get()));
  EXPECT_STREQ(kvs_topology_label(bundled.get()), kvs_bundled_topology_description);
  EXPECT_FALSE(kvs_topology_is_this_system(bundled.get()));
}

TEST(Discovery, missing_file_is_an_io_error_naming_it) {
  kvs_topology_source source = kvs_topology_source_xml_file("tests/data/no-such.xml");
  kvs_topology_t t = reinterpret_cast<kvs_topology_t>(0x1);
  kvs_error err;
  EXPECT_EQ(kvs_topology_create(&source, nullptr, &t, &err), KVS_ERR_IO);
  EXPECT_EQ(err.message, std::string("topology file 'tests/data/no-such.xml' cannot be read: "
                                     "No such file or directory"));
  EXPECT_EQ(t, reinterpret_cast<kvs_topology_t>(0x1));
}

TEST(Discovery, garbage_and_hwloc3_files_are_parse_errors) {
  const std::string garbage = testing::TempDir() + "/garbage.xml";
  const std::string v3 = testing::TempDir() + "/v3.xml";
  {
    std::ofstream(garbage) << "this is not XML\n";
    std::ofstream(v3) << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                         "<!DOCTYPE topology SYSTEM \"hwloc3.dtd\">\n"
                         "<topology version=\"3.0\">\n"
                         "  <object type=\"Machine\" os_index=\"0\" cpuset=\"0x1\" "
                         "gp_index=\"1\"/>\n</topology>\n";
  }
  // Each refusal says what is wrong with the file, not one sentence for all.
  const std::string no_topology = testing::TempDir() + "/no-topology.xml";
  std::ofstream(no_topology) << "<?xml version=\"1.0\"?>\n<html></html>\n";
  const std::pair<std::string, std::string> cases[] = {
      {garbage, "is not XML (it does not start with '<')"},
      {v3, "is an hwloc 3.x export; hwloc " HWLOC_VERSION " reads 2.x exports"},
      {no_topology, "is XML but not an hwloc topology export (no <topology> element"},
      {testing::TempDir(), "is a directory, not an hwloc XML export"},
  };
  for (const auto &c : cases) {
    kvs_topology_source source = kvs_topology_source_xml_file(c.first.c_str());
    kvs_topology_t t = nullptr;
    kvs_error err;
    EXPECT_NE(kvs_topology_create(&source, nullptr, &t, &err), KVS_OK) << c.first;
    EXPECT_NE(std::string(err.message).find(c.second), std::string::npos) << err.message;
    EXPECT_EQ(t, nullptr);
  }
}

TEST(Discovery, bad_arguments_are_refused) {
  kvs_topology_t t = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_topology_create(nullptr, nullptr, &t, &err), KVS_ERR_INVALID_ARGUMENT);
  kvs_topology_source source = kvs_topology_source_bundled();
  // A newer caller's longer options are refused (this build would ignore
  // what it added); an older caller's shorter ones take the defaults.
  kvs_topology_options newer = KVS_TOPOLOGY_OPTIONS_INIT;
  newer.size += 8;
  EXPECT_EQ(kvs_topology_create(&source, &newer, &t, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("KVS_TOPOLOGY_OPTIONS_INIT"), std::string::npos);
  EXPECT_EQ(t, nullptr);
  kvs_topology_options oldest = {sizeof(size_t), false};
  ASSERT_EQ(kvs_topology_create(&source, &oldest, &t, &err), KVS_OK) << err.message;
  EXPECT_EQ(kvs_topology_gpu_count(t), 8u);
  kvs_topology_destroy(t);
  t = nullptr;
  kvs_topology_source empty = kvs_topology_source_xml_buffer("empty", "", 0);
  EXPECT_EQ(kvs_topology_create(&empty, nullptr, &t, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t, nullptr);
  kvs_topology_destroy(nullptr);  // accepted
}

TEST(Discovery, pci_bus_ids_parse_format_and_order) {
  kvs_pci_address a{}, b{};
  kvs_error err;
  ASSERT_EQ(kvs_pci_address_parse("0000:07:00.0", &a, &err), KVS_OK);
  EXPECT_EQ(a.bus, 7u);
  // cudaDeviceGetPCIBusId and nvidia-smi print an 8-digit domain, upper case.
  ASSERT_EQ(kvs_pci_address_parse("00000000:9D:1F.7", &b, &err), KVS_OK);
  char buf[KVS_PCI_BUSID_LEN];
  kvs_pci_address_format(&b, buf);
  EXPECT_STREQ(buf, "0000:9d:1f.7");
  EXPECT_LT(kvs_pci_address_compare(&a, &b), 0);
  EXPECT_GT(kvs_pci_address_compare(&b, &a), 0);
  EXPECT_EQ(kvs_pci_address_compare(&a, &a), 0);
  for (const char *bad :
       {"", "0000:07:00", "0000:07:00.8", "0000:107:00.0", "x:07:00.0", "0000:07:00.0 "}) {
    EXPECT_EQ(kvs_pci_address_parse(bad, &a, &err), KVS_ERR_PARSE) << bad;
  }
  EXPECT_EQ(a.bus, 7u);  // unchanged by the failures
  EXPECT_EQ(std::string(err.message),
            "PCI bus id '0000:07:00.0 ' is not of the form 0000:07:00.0 "
            "(domain:bus:device.function, hex)");
}

// The running machine always loads; with no GPU visible to CUDA the
// note says why and the GPU list is hwloc's.
TEST(Discovery, live_machine_loads) {
  kvs_topology_source source = kvs_topology_source_live();
  kvs_topology_t raw = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_topology_create(&source, nullptr, &raw, &err), KVS_OK) << err.message;
  Topology t(raw);
  EXPECT_TRUE(kvs_topology_is_this_system(t.get()));
  EXPECT_GE(kvs_topology_numa_count(t.get()), 1u);
  if (!kvs_topology_cuda_used(t.get())) {
    EXPECT_STRNE(kvs_topology_cuda_note(t.get()), "");
  }
}

// Device check: runs where CUDA sees GPUs, skips where CUDA says there is
// none (naming why), fails where asking CUDA fails (gpu_gate.h); the live
// topology must then have used CUDA's devices.
TEST(Discovery, live_cuda_devices_match_their_pci_objects) {
  KVS_NEED_GPU(kvs_gpu_gate::probe());
  kvs_topology_source source = kvs_topology_source_live();
  kvs_topology_t raw = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_topology_create(&source, nullptr, &raw, &err), KVS_OK) << err.message;
  Topology t(raw);
  ASSERT_TRUE(kvs_topology_cuda_used(t.get()))
      << "CUDA sees GPUs, but the live topology did not use them: "
      << kvs_topology_cuda_note(t.get());
  for (const kvs_gpu_info &g : gpus_of(t.get())) {
    EXPECT_EQ(g.cuda_device, static_cast<int>(g.index));
    EXPECT_GT(g.total_bytes, 0u);
    EXPECT_LE(g.free_bytes, g.total_bytes);
    EXPECT_STRNE(g.model, "");
    kvs_pci_address back{};
    EXPECT_EQ(kvs_pci_address_parse(g.pci_busid, &back, nullptr), KVS_OK);
    if (g.in_topology) {
      EXPECT_EQ(g.vendor_id, KVS_PCI_VENDOR_NVIDIA) << g.pci_busid;
      EXPECT_STRNE(g.cpuset, "") << g.pci_busid;
    }
  }
}

namespace {

// The HGX export with one GPU's bus id replaced, loaded from a buffer and
// from a file.
std::string hgx_with(const std::string &from, const std::string &to) {
  std::ifstream in(data_path(kHgx));
  std::stringstream s;
  s << in.rdbuf();
  std::string xml = s.str();
  size_t at = xml.find("pci_busid=\"" + from + "\"");
  EXPECT_NE(at, std::string::npos);
  xml.replace(at + 11, from.size(), to);
  return xml;
}

kvs_status load_text(const std::string &xml, kvs_error *err) {
  kvs_topology_source source = kvs_topology_source_xml_buffer("edited", xml.c_str(), xml.size());
  kvs_topology_t t = nullptr;
  kvs_status status = kvs_topology_create(&source, nullptr, &t, err);
  kvs_topology_destroy(t);
  return status;
}

}  // namespace

// Two GPUs at one bus id would be two ranks on one device, each with the
// full budget: refused, naming the bus id.
TEST(Discovery, two_gpus_at_one_bus_id_are_refused) {
  kvs_error err;
  EXPECT_EQ(load_text(hgx_with("0000:43:00.0", "0000:1b:00.0"), &err), KVS_ERR_PARSE);
  EXPECT_NE(std::string(err.message).find("lists two GPUs at PCI bus id 0000:1b:00.0"),
            std::string::npos)
      << err.message;
}

// A GPU whose bus id hwloc cannot parse is dropped by hwloc; the plan must
// not quietly run on seven: refused, naming the counts, from a buffer and
// from a file.
TEST(Discovery, a_gpu_hwloc_drops_is_reported_not_lost) {
  std::string xml = hgx_with("0000:43:00.0", "zz:43:00.0");
  kvs_error err;
  EXPECT_EQ(load_text(xml, &err), KVS_ERR_PARSE);
  EXPECT_NE(std::string(err.message).find("describes 8 NVIDIA GPUs but hwloc loaded 7"),
            std::string::npos)
      << err.message;
  std::string path = testing::TempDir() + "/dropped.xml";
  std::ofstream(path) << xml;
  kvs_topology_source source = kvs_topology_source_xml_file(path.c_str());
  kvs_topology_t t = nullptr;
  EXPECT_EQ(kvs_topology_create(&source, nullptr, &t, &err), KVS_ERR_PARSE);
  EXPECT_EQ(t, nullptr);
  EXPECT_NE(std::string(err.message).find("1 of them were dropped"), std::string::npos)
      << err.message;
}
