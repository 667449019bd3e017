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
  kvs_status (*prepare)(const struct kvs_topology_source *self,
                        struct hwloc_topology *topology, kvs_error *err);
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

/* The running machine, discovered by hwloc. */
kvs_topology_source kvs_topology_source_live(void);

/* An hwloc 2.x XML export (hwloc 2.9 cannot read version="3.0" files). */
kvs_topology_source kvs_topology_source_xml_file(const char *path);

/* XML text in memory; label names it in messages. */
kvs_topology_source kvs_topology_source_xml_buffer(const char *label, const char *xml,
                                                   size_t len);

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
