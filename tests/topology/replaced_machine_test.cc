// The live topology is the running machine or a refusal naming why: hwloc's
// environment variables that replace what it discovers (an XML export, a
// synthetic machine, another filesystem root, CPUID dumps, a chosen set of
// components, "not this system") are refused for "live" and "auto", which
// then does not fall back to the bundled server. And an export whose GPU
// has no pci_busid is refused naming the GPU, not planned at 0000:00:00.0.
#include <gtest/gtest.h>
#include <hwloc.h>
#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "plan/node_setup.h"
#include "tests/topology/helpers.h"

using namespace kvs_test;

namespace {

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// Sets one variable for the scope of a test and restores the environment.
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    const char *old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char *name_;
  bool had_ = false;
  std::string old_;
};

struct Replacing {
  const char *name;
  std::string value;
};

std::string hgx_path() { return data_path(kHgx); }

// Every variable with a value that would replace this machine.
std::vector<Replacing> replacing() {
  return {{"HWLOC_XMLFILE", hgx_path()},      {"HWLOC_SYNTHETIC", "pack:2 core:2 pu:1"},
          {"HWLOC_FSROOT", "/tmp"},           {"HWLOC_CPUID_PATH", "/tmp"},
          {"HWLOC_COMPONENTS", "no_os,stop"}, {"HWLOC_THISSYSTEM", "0"}};
}

TEST(ReplacedMachine, each_replacing_variable_refuses_the_live_topology_naming_it) {
  for (const Replacing &r : replacing()) {
    ScopedEnv env(r.name, r.value.c_str());
    kvs_topology_source source = kvs_topology_source_live();
    kvs_topology_t t = reinterpret_cast<kvs_topology_t>(0x1);
    kvs_error err;
    EXPECT_EQ(kvs_topology_create(&source, nullptr, &t, &err), KVS_ERR_UNSUPPORTED) << r.name;
    EXPECT_EQ(t, reinterpret_cast<kvs_topology_t>(0x1)) << "*out is written only on success";
    EXPECT_TRUE(contains(err.message, r.name)) << err.message;
    EXPECT_TRUE(contains(err.message, "'" + r.value + "'")) << err.message;
    EXPECT_TRUE(contains(err.message, "the live topology is refused")) << err.message;
    EXPECT_EQ(kvs_topology_live_environment_check(&err), KVS_ERR_UNSUPPORTED) << r.name;
  }
}

TEST(ReplacedMachine, live_and_auto_are_refused_and_auto_does_not_fall_back_to_the_bundled_server) {
  for (const Replacing &r : replacing()) {
    ScopedEnv env(r.name, r.value.c_str());
    for (const char *spec : {"live", "auto"}) {
      kvs_topology_t t = nullptr;
      char note[512] = "untouched";
      kvs_error err;
      EXPECT_EQ(kvs_host_topology_open(spec, &t, note, sizeof note, &err), KVS_ERR_UNSUPPORTED)
          << spec << " with " << r.name;
      EXPECT_EQ(t, nullptr);
      EXPECT_TRUE(contains(err.message, r.name)) << err.message;
      EXPECT_FALSE(contains(note, "bundled")) << note;
    }
    kvs_topology_t t = nullptr;
    kvs_error err;
    EXPECT_EQ(kvs_host_topology_open(nullptr, &t, nullptr, 0, &err), KVS_ERR_UNSUPPORTED);
    EXPECT_EQ(t, nullptr);
  }
}

// The variables replace discovery only: an export or the bundled server is
// what it is whatever the environment says.
TEST(ReplacedMachine, exports_and_the_bundled_server_still_load_with_the_variables_set) {
  for (const Replacing &r : replacing()) {
    ScopedEnv env(r.name, r.value.c_str());
    for (const std::string &spec : {std::string("bundled"), hgx_path()}) {
      kvs_topology_t raw = nullptr;
      kvs_error err;
      ASSERT_EQ(kvs_host_topology_open(spec.c_str(), &raw, nullptr, 0, &err), KVS_OK)
          << spec << " with " << r.name << ": " << err.message;
      Topology t(raw);
      EXPECT_EQ(kvs_topology_gpu_count(t.get()), 8u);
      EXPECT_FALSE(kvs_topology_is_this_system(t.get()));
    }
  }
}

// Set to a value hwloc reads as "this machine" the variable changes
// nothing for the live source, and an empty replacing variable is still
// refused (hwloc acts on HWLOC_FSROOT="" by reading from the root "").
TEST(ReplacedMachine, thissystem_1_is_harmless_and_an_empty_variable_still_counts) {
  {
    ScopedEnv env("HWLOC_THISSYSTEM", "1");
    kvs_topology_source source = kvs_topology_source_live();
    kvs_topology_t raw = nullptr;
    kvs_error err;
    ASSERT_EQ(kvs_topology_create(&source, nullptr, &raw, &err), KVS_OK) << err.message;
    Topology t(raw);
    EXPECT_TRUE(kvs_topology_is_this_system(t.get()));
  }
  ScopedEnv env("HWLOC_FSROOT", "");
  kvs_error err;
  EXPECT_EQ(kvs_topology_live_environment_check(&err), KVS_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(err.message, "HWLOC_FSROOT is set ('')")) << err.message;
}

// A source that says it is this machine but gives hwloc an export: what a
// replaced discovery the environment check does not name looks like. The
// loaded topology is refused, not planned as this machine with CUDA unasked.
kvs_status prepare_export(const kvs_topology_source *self, hwloc_topology *topology,
                          kvs_error *err) {
  if (hwloc_topology_set_xml(topology, self->path) != 0) {
    return kvs_error_set(err, KVS_ERR_PARSE, "cannot point hwloc at %s", self->path);
  }
  return KVS_OK;
}

bool claims_this_system(const kvs_topology_source *) { return true; }

TEST(ReplacedMachine, a_source_claiming_this_machine_that_hwloc_calls_another_is_refused) {
  static const kvs_topology_source_i iface = {"lying", prepare_export, claims_this_system};
  std::string path = hgx_path();
  kvs_topology_source source = {&iface, "lying", path.c_str(), nullptr, 0};
  kvs_topology_t t = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_topology_create(&source, nullptr, &t, &err), KVS_ERR_UNSUPPORTED);
  EXPECT_EQ(t, nullptr);
  EXPECT_TRUE(contains(err.message,
                       "topology 'lying' is meant to be this machine, but hwloc "
                       "calls what it loaded"))
      << err.message;
}

// ---- a GPU without a bus id ----

std::string hgx_text() {
  std::ifstream in(hgx_path());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The export with the pci_busid attribute of the GPU at `busid` removed.
std::string without_busid(const std::string &busid) {
  std::string xml = hgx_text();
  std::string attr = "pci_busid=\"" + busid + "\" ";
  size_t at = xml.find(attr);
  EXPECT_NE(at, std::string::npos) << busid;
  if (at != std::string::npos) xml.erase(at, attr.size());
  return xml;
}

TEST(MissingBusId, a_gpu_without_pci_busid_is_refused_naming_it_from_a_buffer_and_a_file) {
  std::string xml = without_busid("0000:1b:00.0");
  kvs_topology_source source = kvs_topology_source_xml_buffer("edited", xml.c_str(), xml.size());
  kvs_topology_t t = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_topology_create(&source, nullptr, &t, &err), KVS_ERR_PARSE);
  EXPECT_EQ(t, nullptr);
  std::string m = err.message;
  EXPECT_TRUE(contains(m, "topology 'edited': NVIDIA GPU 1 in file order")) << m;
  EXPECT_TRUE(contains(m, "pci_type \"0302 [10de:2335]")) << m;
  EXPECT_TRUE(contains(m, "has no pci_busid")) << m;
  EXPECT_TRUE(contains(m, "0000:00:00.0")) << m;
  // The line and gp_index the export gives it.
  size_t line = 1 + std::count(xml.begin(), xml.begin() + xml.find("[10de:2335]"), '\n');
  EXPECT_TRUE(contains(m, "(line " + std::to_string(line) + ", gp_index ")) << m;

  std::string path = testing::TempDir() + "/nobusid.xml";
  std::ofstream(path) << xml;
  kvs_topology_source file = kvs_topology_source_xml_file(path.c_str());
  EXPECT_EQ(kvs_topology_create(&file, nullptr, &t, &err), KVS_ERR_PARSE);
  EXPECT_EQ(t, nullptr);
  EXPECT_TRUE(contains(err.message, "topology '" + path + "': NVIDIA GPU 1 in file order"))
      << err.message;
  EXPECT_EQ(kvs_host_topology_open(path.c_str(), &t, nullptr, 0, &err), KVS_ERR_PARSE);
}

TEST(MissingBusId, the_last_gpu_is_named_by_its_place_and_other_devices_are_not_gpus) {
  std::string xml = without_busid("0000:df:00.0");
  kvs_topology_source source = kvs_topology_source_xml_buffer("edited", xml.c_str(), xml.size());
  kvs_topology_t t = nullptr;
  kvs_error err;
  EXPECT_EQ(kvs_topology_create(&source, nullptr, &t, &err), KVS_ERR_PARSE);
  EXPECT_TRUE(contains(err.message, "NVIDIA GPU 8 in file order")) << err.message;
  // An NVSwitch (a bridge, not a GPU) without a bus id is hwloc's business.
  xml = without_busid("0000:05:00.0");
  source = kvs_topology_source_xml_buffer("switch", xml.c_str(), xml.size());
  ASSERT_EQ(kvs_topology_create(&source, nullptr, &t, &err), KVS_OK) << err.message;
  Topology loaded(t);
  EXPECT_EQ(kvs_topology_gpu_count(loaded.get()), 8u);
}

}  // namespace
