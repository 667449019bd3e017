#include "topology/source.h"

#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* ---- live ---------------------------------------------------------------- */

static kvs_status live_prepare(const kvs_topology_source *self, hwloc_topology_t topology,
                               kvs_error *err) {
  (void)self;
  (void)topology;
  (void)err;
  return KVS_OK; /* hwloc discovers the running machine by default */
}

static bool always(const kvs_topology_source *self) {
  (void)self;
  return true;
}

static bool never(const kvs_topology_source *self) {
  (void)self;
  return false;
}

static const kvs_topology_source_i live_iface = {"live", live_prepare, always};

kvs_topology_source kvs_topology_source_live(void) {
  kvs_topology_source s = {&live_iface, "live", NULL, NULL, 0};
  return s;
}

/* ---- XML file -------------------------------------------------------------- */

static kvs_status file_prepare(const kvs_topology_source *self, hwloc_topology_t topology,
                               kvs_error *err) {
  if (self->path == NULL || self->path[0] == '\0') {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "topology file path is empty");
  }
  /* hwloc reports an unreadable file only as -1; open it first so the
   * message says why. */
  FILE *f = fopen(self->path, "rb");
  if (f == NULL) {
    return kvs_error_set(err, KVS_ERR_IO, "topology file '%s' cannot be read: %s", self->path,
                         strerror(errno));
  }
  fclose(f);
  if (hwloc_topology_set_xml(topology, self->path) != 0) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "topology file '%s' is not an hwloc XML export that hwloc %s can load "
                         "(hwloc 2.x files load; version=\"3.0\" ones do not)",
                         self->path, HWLOC_VERSION);
  }
  return KVS_OK;
}

/* An XML topology describes some machine, not necessarily this one:
 * binding to its cpusets would bind to CPUs that may not exist here. */
static const kvs_topology_source_i file_iface = {"xml-file", file_prepare, never};

kvs_topology_source kvs_topology_source_xml_file(const char *path) {
  kvs_topology_source s = {&file_iface, path, path, NULL, 0};
  return s;
}

/* ---- XML buffer ------------------------------------------------------------ */

static kvs_status buffer_prepare(const kvs_topology_source *self, hwloc_topology_t topology,
                                 kvs_error *err) {
  if (self->buffer == NULL || self->buffer_len == 0 || self->buffer_len >= INT_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "topology buffer '%s' is empty or larger than 2 GiB",
                         self->label != NULL ? self->label : "");
  }
  /* The size counts the terminating NUL, as hwloc's own exports do. */
  if (hwloc_topology_set_xmlbuffer(topology, self->buffer, (int)self->buffer_len + 1) != 0) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "topology buffer '%s' is not an hwloc XML export that hwloc %s can "
                         "load",
                         self->label != NULL ? self->label : "", HWLOC_VERSION);
  }
  return KVS_OK;
}

static const kvs_topology_source_i buffer_iface = {"xml-buffer", buffer_prepare, never};

kvs_topology_source kvs_topology_source_xml_buffer(const char *label, const char *xml,
                                                   size_t len) {
  kvs_topology_source s = {&buffer_iface, label, NULL, xml, len};
  return s;
}

const char kvs_bundled_topology_description[] =
    "bundled 8-GPU server (2 sockets x 4 H200, 4 NVSwitch)";

kvs_topology_source kvs_topology_source_bundled(void) {
  return kvs_topology_source_xml_buffer(kvs_bundled_topology_description,
                                        kvs_bundled_topology_xml,
                                        strlen(kvs_bundled_topology_xml));
}
