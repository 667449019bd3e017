/* Where a topology comes from: the running machine (hwloc discovery), an
 * hwloc XML export on disk, or XML text in memory (the bundled 8-GPU
 * server). Each source is a small vtable plus its own fields, in the
 * shape of hwloc's discovery components: the loader asks the source to
 * point hwloc at itself, then loads.
 *
 * Sources are plain values that borrow their strings: the path or buffer
 * must outlive the kvs_topology_create call that uses the source (the
 * topology keeps no pointer to them afterwards). */
#ifndef KVS_TOPOLOGY_SOURCE_H
#define KVS_TOPOLOGY_SOURCE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hwloc_topology; /* hwloc_topology_t, without pulling in hwloc.h */
struct kvs_topology_source;

typedef struct kvs_topology_source_i {
  /* "live", "xml-file", "xml-buffer". */
  const char *name;
  /* Points a freshly initialised, not yet loaded hwloc topology at the
   * source. Returns KVS_OK or an error naming the source. Required. */
  kvs_status (*prepare)(const struct kvs_topology_source *self, struct hwloc_topology *topology,
                        kvs_error *err);
  /* Whether the loaded topology describes the machine running us: only
   * then may threads and memory be bound and CUDA devices be matched to
   * it. Required. */
  bool (*is_this_system)(const struct kvs_topology_source *self);
} kvs_topology_source_i;

typedef struct kvs_topology_source {
  const kvs_topology_source_i *iface;
  /* For messages: "live", the file path, or the buffer's label. */
  const char *label;
  const char *path;   /* xml-file only */
  const char *buffer; /* xml-buffer only: NUL-terminated XML text */
  size_t buffer_len;  /* strlen(buffer) */
} kvs_topology_source;

/* The running machine, discovered by hwloc. Live means this machine or a
 * refusal: hwloc's environment can replace what it discovers (HWLOC_XMLFILE
 * loads an export, HWLOC_SYNTHETIC a synthetic machine, HWLOC_FSROOT reads
 * another Linux root, HWLOC_CPUID_PATH x86 CPUID dumps, HWLOC_COMPONENTS
 * picks the discovery components, HWLOC_THISSYSTEM=0 says the result is not
 * this machine), and a plan of that machine would price another machine's
 * GPUs and memory as this one's. Preparing the live source with any of them
 * set (even empty; HWLOC_THISSYSTEM only when hwloc reads it as 0) is
 * KVS_ERR_UNSUPPORTED naming the variable and its value, and so is a live
 * load hwloc still calls not this system. */
kvs_topology_source kvs_topology_source_live(void);

/* The check the live source makes: KVS_OK when no variable of hwloc's
 * environment replaces the running machine, else the refusal above. The
 * "auto" planner asks it before falling back to the bundled server, so a
 * replaced machine is refused rather than planned as the stand-in. */
kvs_status kvs_topology_live_environment_check(kvs_error *err);

/* An hwloc 2.x XML export (hwloc 2.9 cannot read version="3.0" files).
 * An NVIDIA GPU's PCI object without a pci_busid attribute is refused
 * (KVS_ERR_PARSE naming the GPU by its place in the file, line, gp_index
 * and pci_type): hwloc would load it at bus id 0000:00:00.0, an address
 * no GPU has, and the plan would name a device that does not exist. XML
 * buffers are checked alike. */
kvs_topology_source kvs_topology_source_xml_file(const char *path);

/* XML text in memory; label names it in messages. */
kvs_topology_source kvs_topology_source_xml_buffer(const char *label, const char *xml, size_t len);

/* The 8-GPU server compiled into the library (two sockets, four H200
 * GPUs each, four NVSwitch chips): the planner's stand-in when the
 * machine has no GPU. Its text is topology/data/hgx-h200-2socket-8gpu.xml. */
kvs_topology_source kvs_topology_source_bundled(void);

/* The bundled topology's XML text and a one-line description of it. */
extern const char kvs_bundled_topology_xml[];
extern const char kvs_bundled_topology_description[];

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOPOLOGY_SOURCE_H */
