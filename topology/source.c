#include "topology/source.h"

#include <errno.h>
#include <fcntl.h>
#include <hwloc.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_kind.h"
#include "topology/gpu.h"

/* ---- live ---------------------------------------------------------------- */

/* hwloc 2.9's environment variables that replace what its discovery of
 * the running machine reads (its "Environment Variables" documentation;
 * hwloc_topology_load reads them when no source was set, which is the live
 * case), each with what hwloc would do instead. */
static const struct replacing_variable {
  const char *name;
  const char *instead;
} kReplacing[] = {
    {"HWLOC_XMLFILE", "load that XML export instead of discovering this machine"},
    {"HWLOC_SYNTHETIC", "build that synthetic topology instead of discovering this machine"},
    {"HWLOC_FSROOT", "read the Linux topology under that root instead of this machine's /"},
    {"HWLOC_CPUID_PATH", "read x86 CPUID dumps from that folder instead of this machine's CPUs"},
    {"HWLOC_COMPONENTS", "run the discovery components it lists instead of its own choice"},
};

kvs_status kvs_topology_live_environment_check(kvs_error *err) {
  for (size_t i = 0; i < sizeof kReplacing / sizeof kReplacing[0]; i++) {
    const char *value = getenv(kReplacing[i].name);
    if (value == NULL) continue;
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "the live topology is refused: %s is set ('%.200s'): hwloc would %s, "
                         "and a plan of that would budget another machine's GPUs as this one's; "
                         "unset %s to plan this machine, or load an export as a topology file",
                         kReplacing[i].name, value, kReplacing[i].instead, kReplacing[i].name);
  }
  /* hwloc reads the value with atoi: anything but a non-zero number says
   * "not this system", which turns CUDA and binding off. */
  const char *thissystem = getenv("HWLOC_THISSYSTEM");
  if (thissystem != NULL && atoi(thissystem) == 0) {
    return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                         "the live topology is refused: HWLOC_THISSYSTEM is set ('%.200s'): "
                         "hwloc would call this machine another one (CUDA unasked, no binding); "
                         "unset it to plan this machine",
                         thissystem);
  }
  return KVS_OK;
}

static kvs_status live_prepare(const kvs_topology_source *self, hwloc_topology_t topology,
                               kvs_error *err) {
  (void)self;
  (void)topology;
  /* hwloc discovers the running machine by default, unless its
   * environment says otherwise. */
  return kvs_topology_live_environment_check(err);
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

/* ---- GPUs without a bus id -------------------------------------------------- */

/* The first `needle` in [p, end), or NULL. */
static const char *find(const char *p, const char *end, const char *needle) {
  size_t n = strlen(needle);
  for (; p != NULL && (size_t)(end - p) >= n; p++) {
    p = memchr(p, needle[0], (size_t)(end - p));
    if (p == NULL || (size_t)(end - p) < n) return NULL;
    if (memcmp(p, needle, n) == 0) return p;
  }
  return NULL;
}

/* The '>' that ends the start tag at tag: the first one outside a quoted
 * attribute value, or NULL. */
static const char *tag_end(const char *tag, const char *end) {
  char quote = 0;
  for (const char *p = tag; p < end; p++) {
    if (quote != 0) {
      if (*p == quote) quote = 0;
    } else if (*p == '"' || *p == '\'') {
      quote = *p;
    } else if (*p == '>') {
      return p;
    }
  }
  return NULL;
}

/* The value of attribute `name` in the tag [tag, end) and its length, or
 * NULL when the tag has no such attribute. */
static const char *attribute(const char *tag, const char *end, const char *name, size_t *len) {
  size_t n = strlen(name);
  for (const char *p = tag; (p = find(p, end, name)) != NULL; p++) {
    bool starts = p > tag && (p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n' || p[-1] == '\r');
    if (!starts || (size_t)(end - p) < n + 2 || p[n] != '=' ||
        (p[n + 1] != '"' && p[n + 1] != '\'')) {
      continue;
    }
    const char *value = p + n + 2;
    const char *close = memchr(value, p[n + 1], (size_t)(end - value));
    if (close == NULL) return NULL;
    *len = (size_t)(close - value);
    return value;
  }
  return NULL;
}

/* Whether the PCIDev tag [tag, end) is an NVIDIA GPU by its pci_type
 * ("0302 [10de:2335] ..."); *type and *type_len give the attribute. */
static bool is_nvidia_gpu_tag(const char *tag, const char *end, const char **type,
                              size_t *type_len) {
  size_t len;
  const char *kind = attribute(tag, end, "type", &len);
  if (kind == NULL || len != 6 || memcmp(kind, "PCIDev", 6) != 0) return false;
  *type = attribute(tag, end, "pci_type", type_len);
  if (*type == NULL) return false;
  char text[64];
  snprintf(text, sizeof text, "%.*s", (int)(*type_len < 63 ? *type_len : 63), *type);
  unsigned cls = 0, vendor = 0;
  return sscanf(text, "%4x [%4x:", &cls, &vendor) == 2 && kvs_pci_is_nvidia_gpu(vendor, cls);
}

/* Refuses XML text in which an NVIDIA GPU's PCI object has no pci_busid:
 * hwloc loads such an object at 0000:00:00.0, and a plan would then name
 * (and budget) a GPU at an address no GPU has. A bus id hwloc cannot parse
 * is another matter: hwloc drops that object, which kvs_topology_create
 * counts and refuses. */
static kvs_status check_gpu_busids(const char *label, const char *text, size_t len,
                                   kvs_error *err) {
  const char *end = text + len;
  size_t gpu = 0;
  for (const char *p = text; (p = find(p, end, "<object")) != NULL; p++) {
    const char *close = tag_end(p, end);
    if (close == NULL) break; /* an unclosed tag: hwloc refuses the file */
    const char *type;
    size_t type_len, unused;
    if (!is_nvidia_gpu_tag(p, close, &type, &type_len)) continue;
    gpu++;
    if (attribute(p, close, "pci_busid", &unused) != NULL) continue;
    size_t line = 1, gp_len = 0;
    for (const char *q = text; q < p; q++) line += *q == '\n';
    const char *gp_index = attribute(p, close, "gp_index", &gp_len);
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "topology '%s': NVIDIA GPU %zu in file order (line %zu, gp_index %.*s, "
                         "pci_type \"%.*s\") has no pci_busid: hwloc would place it at bus id "
                         "0000:00:00.0, where no GPU is; fix the export",
                         label, gpu, line, gp_index != NULL ? (int)gp_len : 4,
                         gp_index != NULL ? gp_index : "none", (int)(type_len < 64 ? type_len : 64),
                         type);
  }
  return KVS_OK;
}

/* ---- XML file -------------------------------------------------------------- */

/* Exports of real machines are kilobytes to a few megabytes. */
#define MAX_TOPOLOGY_FILE (1ull << 30)

/* Reads the whole of the file check_file looked at, for the checks hwloc
 * does not make; *text is malloc'ed. */
static kvs_status read_whole(const char *path, char **text, size_t *len, kvs_error *err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int why = errno;
    if (fd >= 0) close(fd);
    return kvs_error_set(err, KVS_ERR_IO, "topology file '%s' cannot be read: %s", path,
                         fd >= 0 && why == 0 ? "it is no longer a regular file" : strerror(why));
  }
  if ((unsigned long long)st.st_size > MAX_TOPOLOGY_FILE) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "topology file '%s' is %lld bytes, more than the %llu an hwloc export "
                         "of any machine takes",
                         path, (long long)st.st_size, MAX_TOPOLOGY_FILE);
  }
  char *buf = malloc((size_t)st.st_size + 1);
  if (buf == NULL) {
    close(fd);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to read topology file '%s'", path);
  }
  ssize_t n = read(fd, buf, (size_t)st.st_size);
  int why = errno;
  close(fd);
  if (n < 0) {
    free(buf);
    return kvs_error_set(err, KVS_ERR_IO, "topology file '%s' cannot be read: %s", path,
                         strerror(why));
  }
  *text = buf;
  *len = (size_t)n;
  return KVS_OK;
}

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
  char *text = NULL;
  size_t len = 0;
  if ((status = read_whole(self->path, &text, &len, err)) != KVS_OK) return status;
  status = check_gpu_busids(self->path, text, len, err);
  free(text);
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
  const char *label = self->label != NULL ? self->label : "";
  kvs_status status = check_gpu_busids(label, self->buffer, self->buffer_len, err);
  if (status != KVS_OK) return status;
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
