#include "topology/source.h"

#include <errno.h>
#include <fcntl.h>
#include <hwloc.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_kind.h"

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

static const kvs_topology_source_i live_iface = {
    .name = "live", .prepare = live_prepare, .is_this_system = always};

kvs_topology_source kvs_topology_source_live(void) {
  kvs_topology_source s = {&live_iface, "live", NULL, NULL, 0};
  return s;
}

/* ---- XML file -------------------------------------------------------------- */


/* Says what is wrong with a file hwloc would refuse with a bare -1: not a
 * regular file (a FIFO would block hwloc's read forever), not XML, XML
 * without a <topology> element, or an hwloc 3.x export; KVS_OK when its
 * head looks like a 2.x export (hwloc then has the last word). */
static kvs_status check_file(const char *path, kvs_error *err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    return kvs_error_set(err, KVS_ERR_IO, "topology file '%s' cannot be read: %s", path,
                         strerror(errno));
  }
  struct stat st;
  char head[4096];
  ssize_t n = -1;
  kvs_status status = KVS_OK;
  if (fstat(fd, &st) != 0) {
    status = kvs_error_set(err, KVS_ERR_IO, "topology file '%s' cannot be read: %s", path,
                           strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    status = kvs_error_set(err, KVS_ERR_IO, "topology file '%s' is %s, not an hwloc XML export",
                           path, kvs_file_kind(st.st_mode));
  } else if ((n = read(fd, head, sizeof head - 1)) < 0) {
    status = kvs_error_set(err, KVS_ERR_IO, "topology file '%s' cannot be read: %s", path,
                           strerror(errno));
  }
  close(fd);
  if (status != KVS_OK) return status;
  head[n] = '\0';
  const char *p = head;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  if (n == 0) {
    return kvs_error_set(err, KVS_ERR_PARSE, "topology file '%s' is empty", path);
  }
  if (*p != '<') {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "topology file '%s' is not XML (it does not start with '<')", path);
  }
  if (strstr(head, "<topology") == NULL) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "topology file '%s' is XML but not an hwloc topology export (no "
                         "<topology> element in its first %zd bytes)",
                         path, n);
  }
  if (strstr(head, "version=\"3.") != NULL) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "topology file '%s' is an hwloc 3.x export; hwloc %s reads 2.x exports "
                         "(export it with hwloc 2, or lstopo --of xml from this machine)",
                         path, HWLOC_VERSION);
  }
  return KVS_OK;
}

static kvs_status file_prepare(const kvs_topology_source *self, hwloc_topology_t topology,
                               kvs_error *err) {
  if (self->path == NULL || self->path[0] == '\0') {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "topology file path is empty");
  }
  /* hwloc reports every problem with a file as a bare -1: look first, so
   * the message says what is wrong. */
  kvs_status status = check_file(self->path, err);
  if (status != KVS_OK) return status;
  if (hwloc_topology_set_xml(topology, self->path) != 0) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "topology file '%s' was refused by hwloc %s as an XML export: %s",
                         self->path, HWLOC_VERSION, strerror(errno));
  }
  return KVS_OK;
}

/* An XML topology describes some machine, not necessarily this one:
 * binding to its cpusets would bind to CPUs that may not exist here. */
static const kvs_topology_source_i file_iface = {
    .name = "xml-file", .prepare = file_prepare, .is_this_system = never};

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

static const kvs_topology_source_i buffer_iface = {
    .name = "xml-buffer", .prepare = buffer_prepare, .is_this_system = never};

kvs_topology_source kvs_topology_source_xml_buffer(const char *label, const char *xml, size_t len) {
  kvs_topology_source s = {&buffer_iface, label, NULL, xml, len};
  return s;
}

const char kvs_bundled_topology_description[] =
    "bundled 8-GPU server (2 sockets x 4 H200, 4 NVSwitch)";

kvs_topology_source kvs_topology_source_bundled(void) {
  return kvs_topology_source_xml_buffer(kvs_bundled_topology_description, kvs_bundled_topology_xml,
                                        strlen(kvs_bundled_topology_xml));
}
