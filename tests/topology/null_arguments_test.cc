// Every function topology/ declares, called with NULL (and zero where zero
// is meaningless): a kvs_status call refuses with KVS_ERR_INVALID_ARGUMENT
// and a message naming the argument, changing nothing; an accessor reads
// 0, false, "" or NULL as its header says; a destroy or free accepts NULL.
// Nothing crashes. //tests/core:null_arguments_coverage_test fails naming
// any function of a topology/ header that appears nowhere here (kNoPointer
// lists those with no pointer argument).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <string>

#include "tests/topology/helpers.h"
#include "topology/binding.h"
#include "topology/cuda_probe.h"
#include "topology/gpu.h"
#include "topology/source.h"
#include "topology/topology.h"
#include "tests/null_arguments.h"

namespace {

const char *const kNoPointer[] = {"kvs_pci_is_nvidia_gpu", "kvs_topology_source_live",
                                  "kvs_topology_source_bundled"};

// The CUDA probe's refusals are the backend registry's (their wording is
// not this folder's): the status only.
#define EXPECT_INVALID(call)                              \
  do {                                                    \
    kvs_error err;                                        \
    EXPECT_EQ((call), KVS_ERR_INVALID_ARGUMENT) << #call; \
  } while (0)

TEST(NullArguments, the_no_pointer_list_names_real_functions) {
  EXPECT_TRUE(kvs_pci_is_nvidia_gpu(KVS_PCI_VENDOR_NVIDIA, 0x0302));
  EXPECT_STREQ(kvs_topology_source_live().iface->name, "live");
  EXPECT_STREQ(kvs_topology_source_bundled().iface->name, "xml-buffer");
  EXPECT_EQ(sizeof kNoPointer / sizeof kNoPointer[0], 3u);
}

TEST(NullArguments, gpu) {
  kvs_pci_address a = {1, 2, 3, 4};
  EXPECT_NULL_REFUSED("text", kvs_pci_address_parse(nullptr, &a, &err));
  EXPECT_NULL_REFUSED("out", kvs_pci_address_parse("0000:07:00.0", nullptr, &err));
  EXPECT_EQ(a.bus, 2u);  // untouched
  char buf[KVS_PCI_BUSID_LEN] = "x";
  kvs_pci_address_format(nullptr, buf);
  EXPECT_STREQ(buf, "");
  kvs_pci_address_format(&a, nullptr);
  EXPECT_LT(kvs_pci_address_compare(nullptr, &a), 0);
  EXPECT_GT(kvs_pci_address_compare(&a, nullptr), 0);
  EXPECT_EQ(kvs_pci_address_compare(nullptr, nullptr), 0);
  EXPECT_EQ(kvs_gpu_known_memory_bytes(KVS_PCI_VENDOR_NVIDIA, 0x2335, nullptr), 143771ull << 20);
}

TEST(NullArguments, cuda_probe) {
  // Refused before the backend is looked for.
  EXPECT_INVALID(kvs_cuda_probe_table_get(nullptr, &err));
  size_t n = 0;
  kvs_cuda_device devices[1];
  EXPECT_INVALID(kvs_cuda_probe(nullptr, 1, false, &n, &err));
  EXPECT_INVALID(kvs_cuda_probe(devices, 1, false, nullptr, &err));
  uint64_t free_bytes = 0, total_bytes = 0;
  EXPECT_INVALID(kvs_cuda_probe_mem_info(0, nullptr, &total_bytes, &err));
  EXPECT_INVALID(kvs_cuda_probe_mem_info(0, &free_bytes, nullptr, &err));
  EXPECT_INVALID(kvs_cuda_probe_device_count(nullptr, &err));
}

TEST(NullArguments, source) {
  // A NULL path or buffer makes a source that loading refuses.
  kvs_topology_t t = nullptr;
  kvs_topology_source file = kvs_topology_source_xml_file(nullptr);
  kvs_error err;
  EXPECT_EQ(kvs_topology_create(&file, nullptr, &t, &err), KVS_ERR_INVALID_ARGUMENT);
  kvs_topology_source buffer = kvs_topology_source_xml_buffer(nullptr, nullptr, 0);
  EXPECT_EQ(kvs_topology_create(&buffer, nullptr, &t, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t, nullptr);
  // The environment check takes a NULL error like every call.
  unsetenv("HWLOC_XMLFILE");
  (void)kvs_topology_live_environment_check(nullptr);
}

TEST(NullArguments, topology) {
  kvs_topology_t t = nullptr;
  kvs_topology_source source = kvs_topology_source_bundled();
  EXPECT_NULL_REFUSED("source", kvs_topology_create(nullptr, nullptr, &t, &err));
  EXPECT_NULL_REFUSED("out", kvs_topology_create(&source, nullptr, nullptr, &err));
  kvs_topology_source no_iface = source;
  no_iface.iface = nullptr;
  EXPECT_NULL_REFUSED("source->iface", kvs_topology_create(&no_iface, nullptr, &t, &err));
  kvs_topology_source_i half = *source.iface;
  half.prepare = nullptr;
  kvs_topology_source no_prepare = source;
  no_prepare.iface = &half;
  EXPECT_NULL_REFUSED("source->iface->prepare",
                      kvs_topology_create(&no_prepare, nullptr, &t, &err));
  kvs_topology_source_i other = *source.iface;
  other.is_this_system = nullptr;
  kvs_topology_source no_check = source;
  no_check.iface = &other;
  EXPECT_NULL_REFUSED("source->iface->is_this_system",
                      kvs_topology_create(&no_check, nullptr, &t, &err));
  EXPECT_EQ(t, nullptr);
  kvs_topology_destroy(nullptr);
  EXPECT_EQ(kvs_topology_gpu_count(nullptr), 0u);
  EXPECT_EQ(kvs_topology_gpu(nullptr, 0), nullptr);
  EXPECT_EQ(kvs_topology_gpus(nullptr), nullptr);
  EXPECT_FALSE(kvs_topology_is_this_system(nullptr));
  EXPECT_STREQ(kvs_topology_label(nullptr), "");
  EXPECT_FALSE(kvs_topology_cuda_used(nullptr));
  EXPECT_STREQ(kvs_topology_cuda_note(nullptr), "");
  EXPECT_EQ(kvs_topology_numa_count(nullptr), 0u);
  EXPECT_EQ(kvs_topology_package_count(nullptr), 0u);
  EXPECT_EQ(kvs_topology_memory_bytes(nullptr), 0u);
  EXPECT_EQ(kvs_topology_hwloc(nullptr), nullptr);
  EXPECT_EQ(kvs_topology_gpu_locality(nullptr, 0), nullptr);
}

TEST(NullArguments, binding) {
  kvs_topology_t t = nullptr;
  kvs_topology_source source = kvs_topology_source_bundled();
  ASSERT_EQ(kvs_topology_create(&source, nullptr, &t, nullptr), KVS_OK);
  kvs_test::Topology topology(t);
  kvs_binding_report report;
  void *ptr = nullptr;
  EXPECT_NULL_REFUSED("topology", kvs_topology_bind_thread(nullptr, 0, &report, &err));
  EXPECT_NULL_REFUSED("report", kvs_topology_bind_thread(t, 0, nullptr, &err));
  EXPECT_NULL_REFUSED("topology", kvs_topology_bind_thread_numa(nullptr, 0, &report, &err));
  EXPECT_NULL_REFUSED("report", kvs_topology_bind_thread_numa(t, 0, nullptr, &err));
  EXPECT_NULL_REFUSED("topology", kvs_topology_alloc_near(nullptr, 0, 64, &ptr, &report, &err));
  EXPECT_NULL_REFUSED("out", kvs_topology_alloc_near(t, 0, 64, nullptr, &report, &err));
  EXPECT_NULL_REFUSED("report", kvs_topology_alloc_near(t, 0, 64, &ptr, nullptr, &err));
  kvs_error err;
  EXPECT_EQ(kvs_topology_alloc_near(t, 0, 0, &ptr, &report, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("cannot allocate 0 bytes"), std::string::npos)
      << err.message;
  EXPECT_EQ(ptr, nullptr);
  kvs_topology_free_near(nullptr, nullptr, 0);
  kvs_topology_free_near(t, nullptr, 64);
}

}  // namespace
