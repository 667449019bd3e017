// NUMA binding: refused but reported on a topology that is not this
// machine (nothing changes), made on the live machine where supported,
// and host buffers near a GPU that are always usable.
#include <gtest/gtest.h>
#include <hwloc.h>
#include <sched.h>

#include <cstring>
#include <string>

#include "tests/topology/helpers.h"
#include "topology/binding.h"

using namespace kvs_test;

namespace {

cpu_set_t current_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  return set;
}

}  // namespace

TEST(Binding, xml_topology_is_reported_not_bound_and_nothing_changes) {
  Topology t = load_xml(kHgx);
  ASSERT_TRUE(t);
  cpu_set_t before = current_affinity();
  kvs_binding_report report;
  kvs_error err;
  ASSERT_EQ(kvs_topology_bind_thread(t.get(), 4, &report, &err), KVS_OK) << err.message;
  EXPECT_FALSE(report.cpu_bound);
  EXPECT_FALSE(report.memory_bound);
  EXPECT_STREQ(report.cpuset, "");
  EXPECT_EQ(std::string(report.reason),
            "not bound: the topology was loaded from XML and is not this machine");
  cpu_set_t after = current_affinity();
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

TEST(Binding, alloc_near_falls_back_to_unbound_memory_on_xml) {
  Topology t = load_xml(kEpyc);
  ASSERT_TRUE(t);
  void *ptr = nullptr;
  kvs_binding_report report;
  kvs_error err;
  const size_t bytes = 1 << 20;
  ASSERT_EQ(kvs_topology_alloc_near(t.get(), 2, bytes, &ptr, &report, &err), KVS_OK) << err.message;
  ASSERT_NE(ptr, nullptr);
  EXPECT_FALSE(report.memory_bound);
  EXPECT_NE(std::string(report.reason).find("not this machine"), std::string::npos);
  std::memset(ptr, 0xab, bytes);  // usable all the same
  kvs_topology_free_near(t.get(), ptr, bytes);
  kvs_topology_free_near(t.get(), nullptr, 0);  // accepted
}

TEST(Binding, bad_arguments_are_errors_with_nothing_written) {
  Topology t = load_xml(kHgx);
  ASSERT_TRUE(t);
  kvs_binding_report report;
  void *ptr = reinterpret_cast<void *>(0x1);
  kvs_error err;
  EXPECT_EQ(kvs_topology_bind_thread(t.get(), 8, &report, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_EQ(std::string(err.message), "GPU 8: the topology has 8 GPUs");
  EXPECT_EQ(kvs_topology_alloc_near(t.get(), 8, 64, &ptr, &report, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_EQ(kvs_topology_alloc_near(t.get(), 0, 0, &ptr, &report, &err), KVS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ptr, reinterpret_cast<void *>(0x1));
  EXPECT_EQ(kvs_topology_bind_thread_numa(t.get(), 7, &report, &err), KVS_ERR_OUT_OF_RANGE);
  EXPECT_EQ(std::string(err.message), "NUMA node 7 is not in the topology");
}

// On the live machine a thread bound to a NUMA node runs only on that
// node's CPUs; where the system forbids it the report says why.
TEST(Binding, live_thread_binds_to_a_numa_node_or_says_why) {
  kvs_topology_source source = kvs_topology_source_live();
  kvs_topology_t raw = nullptr;
  kvs_error err;
  ASSERT_EQ(kvs_topology_create(&source, nullptr, &raw, &err), KVS_OK) << err.message;
  Topology t(raw);
  hwloc_topology_t h = kvs_topology_hwloc(t.get());
  hwloc_obj_t node = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, 0);
  ASSERT_NE(node, nullptr);
  cpu_set_t before = current_affinity();
  kvs_binding_report report;
  ASSERT_EQ(kvs_topology_bind_thread_numa(t.get(), node->os_index, &report, &err), KVS_OK)
      << err.message;
  if (report.cpu_bound) {
    cpu_set_t now = current_affinity();
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
      if (CPU_ISSET(cpu, &now)) {
        EXPECT_TRUE(hwloc_bitmap_isset(node->cpuset, static_cast<unsigned>(cpu))) << cpu;
      }
    }
    EXPECT_STRNE(report.cpuset, "");
  } else {
    EXPECT_STRNE(report.reason, "") << "an unmade binding must say why";
  }
  if (!report.memory_bound) {
    EXPECT_STRNE(report.reason, "");
  }
  sched_setaffinity(0, sizeof before, &before);
  hwloc_set_membind(h, hwloc_topology_get_complete_nodeset(h), HWLOC_MEMBIND_DEFAULT,
                    HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET);
}
