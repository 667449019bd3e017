// Shared helpers for the topology tests: test data paths and RAII holders
// for the C handles.
#ifndef KVS_TESTS_TOPOLOGY_HELPERS_H
#define KVS_TESTS_TOPOLOGY_HELPERS_H

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "plan/deployment.h"
#include "topology/source.h"
#include "topology/topology.h"

namespace kvs_test {

// Test data travels in the runfiles; tests run from the workspace root. A
// bare name is in tests/data; a path is the repository's (the bundled
// server's export lives with the topology code).
inline std::string data_path(const std::string &name) {
  return name.find('/') == std::string::npos ? "tests/data/" + name : name;
}

constexpr const char *kHgx = "topology/data/hgx-h200-2socket-8gpu.xml";
constexpr const char *kEpyc = "epyc-nps2-numa-per-pair-8gpu.xml";
constexpr const char *kDgx2 = "nvidiaDGX2.xml";
constexpr const char *kTwoSocket3Gpu = "24em64t-2n6c2t-pci.xml";

struct TopologyDeleter {
  void operator()(kvs_topology *t) const { kvs_topology_destroy(t); }
};
using Topology = std::unique_ptr<kvs_topology, TopologyDeleter>;

struct PlanDeleter {
  void operator()(kvs_deployment *p) const { kvs_deployment_destroy(p); }
};
using Plan = std::unique_ptr<kvs_deployment, PlanDeleter>;

inline Topology load_xml(const std::string &name) {
  std::string path = data_path(name);
  kvs_topology_source source = kvs_topology_source_xml_file(path.c_str());
  kvs_topology_t t = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_topology_create(&source, nullptr, &t, &err), KVS_OK) << err.message;
  return Topology(t);
}

inline std::vector<kvs_gpu_info> gpus_of(kvs_topology_t t) {
  const kvs_gpu_info *g = kvs_topology_gpus(t);
  return std::vector<kvs_gpu_info>(g, g + kvs_topology_gpu_count(t));
}

// A GPU with just the fields the layout reads.
inline kvs_gpu_info fake_gpu(size_t index, int package, int numa) {
  kvs_gpu_info g{};
  g.index = index;
  g.package = package;
  g.numa_node = numa;
  g.pci.bus = (uint32_t)(0x10 + index);
  kvs_pci_address_format(&g.pci, g.pci_busid);
  g.cuda_device = -1;
  return g;
}

}  // namespace kvs_test

#endif  // KVS_TESTS_TOPOLOGY_HELPERS_H
