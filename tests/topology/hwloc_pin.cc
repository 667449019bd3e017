// Keeps hwloc's plugins loaded for the whole test process.
//
// hwloc 2.9 unloads its discovery plugins when the last topology is
// destroyed; live discovery has by then let libpciaccess (under the pci
// plugin) allocate state that is freed by no one, and once the library is
// unmapped LeakSanitizer reports it as a leak in an "<unknown module>"
// that no suppression can name. One topology that is initialised here
// and never destroyed (reachable from this static) keeps the plugins, and
// with them that state, mapped: the ASan build then reports only leaks of
// our own code. The same holds for libxml2's per-thread state under the
// XML plugin, which a rank thread's exit frees only while the plugin is
// still loaded (tests/shard's ranks are threads).
#include <hwloc.h>

namespace {

hwloc_topology_t pinned = nullptr;

struct Pin {
  Pin() { hwloc_topology_init(&pinned); }
};

Pin pin;

}  // namespace
