#include "topology/topology.h"

#include <errno.h>
#include <dlfcn.h>
#include <hwloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/registry.h"
#include "core/options.h"
#include "topology/cuda_probe.h"

/* CUDA devices one probe lists at most: far above any node. */
#define MAX_CUDA_DEVICES 256

struct kvs_topology {
  hwloc_topology_t hwloc;
  bool this_system;
  bool cuda_used;
  char label[512];
  char cuda_note[KVS_ERROR_MESSAGE_MAX];
  size_t n_gpus;
  kvs_gpu_info *gpus;
  hwloc_obj_t *pci;      /* [n_gpus]: the PCI object, NULL when not in the tree */
  hwloc_obj_t *locality; /* [n_gpus]: its first non-I/O ancestor */
};

static void copy_string(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src != NULL ? src : "");
}

static bool pci_address_of(hwloc_obj_t obj, kvs_pci_address *out) {
  out->domain = obj->attr->pcidev.domain;
  out->bus = obj->attr->pcidev.bus;
  out->device = obj->attr->pcidev.dev;
  out->function = obj->attr->pcidev.func;
  return true;
}

static int compare_pci_objects(const void *a, const void *b) {
  kvs_pci_address x, y;
  pci_address_of(*(const hwloc_obj_t *)a, &x);
  pci_address_of(*(const hwloc_obj_t *)b, &y);
  return kvs_pci_address_compare(&x, &y);
}

/* The model: an OS device's GPUModel (NVML/CUDA backends name the exact
 * board), else the PCI database name. */
static const char *model_of(hwloc_obj_t pci) {
  for (hwloc_obj_t child = pci->io_first_child; child != NULL; child = child->next_sibling) {
    const char *model = hwloc_obj_get_info_by_name(child, "GPUModel");
    if (model != NULL) return model;
  }
  return hwloc_obj_get_info_by_name(pci, "PCIDevice");
}

/* The package a locality object belongs to, or -1: its own or an
 * ancestor's, else the only package whose CPUs contain its CPUs. */
static int package_of(hwloc_topology_t topo, hwloc_obj_t obj) {
  for (hwloc_obj_t o = obj; o != NULL; o = o->parent) {
    if (o->type == HWLOC_OBJ_PACKAGE) return (int)o->os_index;
  }
  hwloc_obj_t found = NULL, pkg = NULL;
  while ((pkg = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, pkg)) != NULL) {
    if (obj->cpuset != NULL && pkg->cpuset != NULL &&
        hwloc_bitmap_isincluded(obj->cpuset, pkg->cpuset)) {
      if (found != NULL) return -1;
      found = pkg;
    }
  }
  return found != NULL ? (int)found->os_index : -1;
}

/* Fills the locality fields of gpu from its PCI object. */
static kvs_status fill_locality(struct kvs_topology *t, size_t i, kvs_error *err) {
  kvs_gpu_info *gpu = &t->gpus[i];
  hwloc_obj_t pci = t->pci[i];
  gpu->numa_node = -1;
  gpu->package = -1;
  gpu->in_topology = pci != NULL;
  if (pci == NULL) return KVS_OK;
  hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(t->hwloc, pci);
  t->locality[i] = local;
  if (local == NULL) return KVS_OK;
  /* Several nodes (a GPU hanging off the whole machine, or a package
   * split into sub-NUMA clusters) mean no single local node. */
  if (local->nodeset != NULL && hwloc_bitmap_weight(local->nodeset) == 1) {
    gpu->numa_node = hwloc_bitmap_first(local->nodeset);
  }
  gpu->package = package_of(t->hwloc, local);
  if (local->cpuset != NULL) {
    int n = hwloc_bitmap_list_snprintf(gpu->cpuset, sizeof gpu->cpuset, local->cpuset);
    if (n < 0 || (size_t)n >= sizeof gpu->cpuset) {
      return kvs_error_set(err, KVS_ERR_OVERFLOW,
                           "GPU %zu (%s): its local cpuset does not fit in %d characters", i,
                           gpu->pci_busid, KVS_CPUSET_STRING_MAX);
    }
  }
  return KVS_OK;
}

/* The NVIDIA display/3D PCI functions of the tree, in bus id order. */
static kvs_status find_pci_gpus(hwloc_topology_t topo, hwloc_obj_t **out, size_t *n_out,
                                kvs_error *err) {
  size_t n = 0, cap = 0;
  hwloc_obj_t *list = NULL;
  hwloc_obj_t obj = NULL;
  while ((obj = hwloc_get_next_pcidev(topo, obj)) != NULL) {
    if (!kvs_pci_is_nvidia_gpu(obj->attr->pcidev.vendor_id, obj->attr->pcidev.class_id)) {
      continue;
    }
    if (n == cap) {
      size_t grown = cap == 0 ? 16 : cap * 2;
      hwloc_obj_t *bigger = realloc(list, grown * sizeof *list);
      if (bigger == NULL) {
        free(list);
        return kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory listing GPUs");
      }
      list = bigger;
      cap = grown;
    }
    list[n++] = obj;
  }
  /* hwloc walks the tree depth first: sort into bus order. */
  if (n > 1) qsort(list, n, sizeof *list, compare_pci_objects);
  *out = list;
  *n_out = n;
  return KVS_OK;
}

static kvs_status alloc_gpus(struct kvs_topology *t, size_t n, kvs_error *err) {
  t->n_gpus = n;
  t->gpus = calloc(n > 0 ? n : 1, sizeof *t->gpus);
  t->pci = calloc(n > 0 ? n : 1, sizeof *t->pci);
  t->locality = calloc(n > 0 ? n : 1, sizeof *t->locality);
  if (t->gpus == NULL || t->pci == NULL || t->locality == NULL) {
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory for %zu GPUs", n);
  }
  return KVS_OK;
}

/* GPUs from the hwloc tree alone. */
static kvs_status gpus_from_hwloc(struct kvs_topology *t, hwloc_obj_t *pcis, size_t n,
                                  kvs_error *err) {
  kvs_status status = alloc_gpus(t, n, err);
  if (status != KVS_OK) return status;
  for (size_t i = 0; i < n; i++) {
    kvs_gpu_info *gpu = &t->gpus[i];
    gpu->index = i;
    gpu->cuda_device = -1;
    pci_address_of(pcis[i], &gpu->pci);
    kvs_pci_address_format(&gpu->pci, gpu->pci_busid);
    gpu->vendor_id = pcis[i]->attr->pcidev.vendor_id;
    gpu->device_id = pcis[i]->attr->pcidev.device_id;
    copy_string(gpu->model, sizeof gpu->model, model_of(pcis[i]));
    t->pci[i] = pcis[i];
    if ((status = fill_locality(t, i, err)) != KVS_OK) return status;
  }
  return KVS_OK;
}

/* GPUs from CUDA, each matched to its PCI object by bus id. */
static kvs_status gpus_from_cuda(struct kvs_topology *t, const kvs_cuda_device *devices, size_t n,
                                 kvs_error *err) {
  kvs_status status = alloc_gpus(t, n, err);
  if (status != KVS_OK) return status;
  for (size_t i = 0; i < n; i++) {
    kvs_gpu_info *gpu = &t->gpus[i];
    const kvs_cuda_device *d = &devices[i];
    gpu->index = i;
    gpu->cuda_device = d->ordinal;
    gpu->pci = d->pci;
    kvs_pci_address_format(&gpu->pci, gpu->pci_busid);
    gpu->free_bytes = d->free_bytes;
    gpu->total_bytes = d->total_bytes;
    copy_string(gpu->model, sizeof gpu->model, d->name);
    hwloc_obj_t pci = hwloc_get_pcidev_by_busid(t->hwloc, d->pci.domain, d->pci.bus, d->pci.device,
                                                d->pci.function);
    t->pci[i] = pci;
    if (pci != NULL) {
      gpu->vendor_id = pci->attr->pcidev.vendor_id;
      gpu->device_id = pci->attr->pcidev.device_id;
    }
    if ((status = fill_locality(t, i, err)) != KVS_OK) return status;
  }
  return KVS_OK;
}

/* hwloc loads its discovery plugins (and libxml2 under the XML one) with
 * the first topology and unloads them with the last; two threads doing
 * either at once race in that global state (seen as libxml2's parser state
 * initialised twice, one copy lost). Ranks run as threads of one process
 * (the loopback backend, kvsim_local), so every hwloc load and destroy
 * here takes one process-wide lock. */
static pthread_mutex_t hwloc_lock = PTHREAD_MUTEX_INITIALIZER;

/* libxml2 keeps a state per thread that parses, freed by a thread-exit
 * destructor under its own key. When the last topology closes, hwloc
 * unloads its XML plugin and libxml2 with it, deleting that key: a rank
 * thread that parsed and is still running then never frees its state
 * (LeakSanitizer: 968 bytes, allocated in an unknown module, in one run
 * of examples/engine.c out of three). Once libxml2 is in the process it
 * stays: marking it never-unload costs nothing and lets every thread's
 * destructor run. Not loaded (hwloc's own XML parser, or no XML), nothing
 * to pin. Called under hwloc_lock, after a load. */
static void keep_libxml2_loaded(void) {
  /* Found among the loaded objects: dlopen("libxml2.so.2", RTLD_NOLOAD)
   * would search the loader's path for it when hwloc parsed without it,
   * and open a FIFO of that name there, for ever (backends/registry.h). */
  void *h = kvs_loaded_object("libxml2.so.2", RTLD_LAZY | RTLD_NODELETE);
  if (h != NULL) dlclose(h);
}

static void free_fields(struct kvs_topology *t) {
  if (t->hwloc != NULL) {
    pthread_mutex_lock(&hwloc_lock);
    hwloc_topology_destroy(t->hwloc);
    pthread_mutex_unlock(&hwloc_lock);
  }
  free(t->gpus);
  free(t->pci);
  free(t->locality);
}

/* hwloc_topology_init and _load of the source, under hwloc_lock. */
static kvs_status load(struct kvs_topology *t, const kvs_topology_source *source, kvs_error *err) {
  kvs_status status = KVS_OK;
  if (hwloc_topology_init(&t->hwloc) != 0) {
    t->hwloc = NULL;
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "hwloc_topology_init failed: %s", strerror(errno));
  }
  /* PCI devices, bridges and OS devices are filtered out by default;
   * GPU discovery needs all three. */
  if (hwloc_topology_set_io_types_filter(t->hwloc, HWLOC_TYPE_FILTER_KEEP_ALL) != 0) {
    status = kvs_error_set(err, KVS_ERR_UNSUPPORTED, "hwloc refuses to keep I/O devices: %s",
                           strerror(errno));
    return status;
  }
  if ((status = source->iface->prepare(source, t->hwloc, err)) != KVS_OK) return status;
  if (hwloc_topology_load(t->hwloc) != 0) {
    int why = errno;
    if (source->iface->is_this_system(source)) {
      status = kvs_error_set(err, KVS_ERR_UNSUPPORTED, "hwloc could not discover '%s': %s",
                             t->label, strerror(why));
    } else {
      /* hwloc accepts any file up front and refuses it at load; its head
       * looked like a 2.x export (source.c checked), so the body is bad. */
      status = kvs_error_set(err, KVS_ERR_PARSE,
                             "topology %s '%s' looks like an hwloc 2.x export but hwloc %s "
                             "could not load it (a malformed element or attribute further in): "
                             "%s",
                             source->path != NULL ? "file" : "buffer", t->label, HWLOC_VERSION,
                             strerror(why));
    }
    return status;
  }
  return KVS_OK;
}

/* How many NVIDIA display/3D PCI functions an hwloc XML text describes
 * (pci_type="03xx [10de:..."), read from the text itself: hwloc drops an
 * object whose bus id it cannot parse without a word, and the plan would
 * then quietly run on fewer GPUs. */
static size_t gpus_in_xml_text(const char *text, size_t len) {
  static const char key[] = "pci_type=\"";
  size_t n = 0;
  const char *end = text + len;
  for (const char *p = text; p < end;) {
    const char *hit = memmem(p, (size_t)(end - p), key, sizeof key - 1);
    if (hit == NULL) break;
    const char *v = hit + sizeof key - 1;
    unsigned cls = 0, vendor = 0;
    if (end - v > 12 && sscanf(v, "%4x [%4x:", &cls, &vendor) == 2 &&
        kvs_pci_is_nvidia_gpu(vendor, cls)) {
      n++;
    }
    p = v;
  }
  return n;
}

/* Refuses an XML topology whose text describes more NVIDIA GPUs than hwloc
 * loaded, naming both counts. Live sources have no text to compare. */
static kvs_status check_nothing_dropped(const struct kvs_topology *t,
                                        const kvs_topology_source *source, size_t loaded,
                                        kvs_error *err) {
  const char *text = source->buffer;
  size_t len = source->buffer_len;
  char *file = NULL;
  if (text == NULL && source->path != NULL) {
    FILE *f = fopen(source->path, "rb");
    if (f == NULL) return KVS_OK; /* hwloc read it a moment ago; nothing to compare */
    if (fseek(f, 0, SEEK_END) == 0) {
      long size = ftell(f);
      if (size > 0 && size < (1l << 30) && fseek(f, 0, SEEK_SET) == 0 &&
          (file = malloc((size_t)size)) != NULL) {
        len = fread(file, 1, (size_t)size, f);
        text = file;
      }
    }
    fclose(f);
  }
  size_t described = text != NULL ? gpus_in_xml_text(text, len) : 0;
  free(file);
  if (described <= loaded) return KVS_OK;
  return kvs_error_set(
      err, KVS_ERR_PARSE,
      "topology '%s' describes %zu NVIDIA GPUs but hwloc loaded %zu: %zu of them were "
      "dropped (hwloc skips an object whose PCI bus id or type it cannot "
      "parse); fix the export",
      t->label, described, loaded, described - loaded);
}

/* A source that says it is this machine must have given hwloc this
 * machine: when hwloc calls what it loaded another one (something in its
 * environment or configuration replaced the discovery that the live
 * source's own check did not name), the topology would plan another
 * machine's GPUs with CUDA unasked, so it is refused. */
static kvs_status check_this_system(const struct kvs_topology *t, const kvs_topology_source *source,
                                    kvs_error *err) {
  if (!source->iface->is_this_system(source) || hwloc_topology_is_thissystem(t->hwloc)) {
    return KVS_OK;
  }
  const char *backend = hwloc_obj_get_info_by_name(hwloc_get_root_obj(t->hwloc), "Backend");
  return kvs_error_set(err, KVS_ERR_UNSUPPORTED,
                       "topology '%s' is meant to be this machine, but hwloc calls what it loaded "
                       "(backend %s) another one: its discovery was replaced (hwloc's environment "
                       "or configuration), so it is refused rather than planned as this machine",
                       t->label, backend != NULL ? backend : "unknown");
}

kvs_status kvs_topology_create(const kvs_topology_source *source,
                               const kvs_topology_options *options, kvs_topology_t *out,
                               kvs_error *err) {
  if (source == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: source is NULL", __func__);
  }
  if (source->iface == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: source->iface is NULL", __func__);
  }
  if (source->iface->prepare == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: source->iface->prepare is NULL",
                         __func__);
  }
  if (source->iface->is_this_system == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: source->iface->is_this_system is NULL",
                         __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  static const kvs_topology_options defaults = KVS_TOPOLOGY_OPTIONS_INIT;
  kvs_topology_options opts;
  kvs_status adopt = kvs_options_adopt(options, &defaults, sizeof defaults,
                                       "KVS_TOPOLOGY_OPTIONS_INIT", &opts, err);
  if (adopt != KVS_OK) return adopt;
  struct kvs_topology *t = calloc(1, sizeof *t);
  if (t == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory");
  copy_string(t->label, sizeof t->label, source->label);
  hwloc_obj_t *pcis = NULL;
  size_t n_pci = 0;
  kvs_status status = KVS_OK;
  pthread_mutex_lock(&hwloc_lock);
  status = load(t, source, err);
  keep_libxml2_loaded();
  pthread_mutex_unlock(&hwloc_lock);
  if (status != KVS_OK) goto fail;
  if ((status = check_this_system(t, source, err)) != KVS_OK) goto fail;
  t->this_system = source->iface->is_this_system(source);
  if ((status = find_pci_gpus(t->hwloc, &pcis, &n_pci, err)) != KVS_OK) goto fail;
  if (!source->iface->is_this_system(source) &&
      (status = check_nothing_dropped(t, source, n_pci, err)) != KVS_OK) {
    goto fail;
  }
  /* Two GPUs at one bus id would give two ranks one device, each with the
   * whole budget: the export is broken, and guessing which is real is not
   * ours to do. Sorted, duplicates are neighbours. */
  for (size_t i = 1; i < n_pci; i++) {
    kvs_pci_address a, b;
    pci_address_of(pcis[i - 1], &a);
    pci_address_of(pcis[i], &b);
    if (kvs_pci_address_compare(&a, &b) == 0) {
      char busid[KVS_PCI_BUSID_LEN];
      kvs_pci_address_format(&a, busid);
      status = kvs_error_set(err, KVS_ERR_PARSE,
                             "topology '%s' lists two GPUs at PCI bus id %s: one device cannot "
                             "be two ranks' GPU",
                             t->label, busid);
      goto fail;
    }
  }

  kvs_cuda_device *devices = NULL;
  size_t n_cuda = 0;
  kvs_error cuda_err;
  kvs_error_clear(&cuda_err);
  if (!t->this_system) {
    copy_string(t->cuda_note, sizeof t->cuda_note,
                "the topology is not this machine, so CUDA was not asked");
  } else if (!opts.use_cuda) {
    copy_string(t->cuda_note, sizeof t->cuda_note, "CUDA was not asked (options.use_cuda)");
  } else {
    devices = calloc(MAX_CUDA_DEVICES, sizeof *devices);
    if (devices == NULL) {
      status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory");
      goto fail;
    }
    if (kvs_cuda_probe(devices, MAX_CUDA_DEVICES, opts.measure_free, &n_cuda, &cuda_err) ==
        KVS_OK) {
      t->cuda_used = true;
    } else if (kvs_backend_broken(KVS_BACKEND_CUDA)) {
      /* CUDA's backend or runtime is there but broken (cut short, ...):
       * an install to repair, never a machine to read as having no GPU. */
      free(devices);
      status = kvs_error_set(err, cuda_err.status, "%s", cuda_err.message);
      goto fail;
    } else {
      copy_string(t->cuda_note, sizeof t->cuda_note, cuda_err.message);
    }
  }
  status =
      t->cuda_used ? gpus_from_cuda(t, devices, n_cuda, err) : gpus_from_hwloc(t, pcis, n_pci, err);
  free(devices);
  if (status != KVS_OK) goto fail;
  free(pcis);
  *out = t;
  return KVS_OK;
fail:
  free(pcis);
  free_fields(t);
  free(t);
  return status;
}

void kvs_topology_destroy(kvs_topology_t t) {
  if (t == NULL) return;
  free_fields(t);
  free(t);
}

/* ---- accessors: a NULL topology reads 0, false, "" or NULL ---- */

size_t kvs_topology_gpu_count(kvs_topology_t t) { return t != NULL ? t->n_gpus : 0; }

const kvs_gpu_info *kvs_topology_gpu(kvs_topology_t t, size_t index) {
  return t != NULL && index < t->n_gpus ? &t->gpus[index] : NULL;
}

const kvs_gpu_info *kvs_topology_gpus(kvs_topology_t t) { return t != NULL ? t->gpus : NULL; }

bool kvs_topology_is_this_system(kvs_topology_t t) { return t != NULL && t->this_system; }

const char *kvs_topology_label(kvs_topology_t t) { return t != NULL ? t->label : ""; }

bool kvs_topology_cuda_used(kvs_topology_t t) { return t != NULL && t->cuda_used; }

const char *kvs_topology_cuda_note(kvs_topology_t t) { return t != NULL ? t->cuda_note : ""; }

size_t kvs_topology_numa_count(kvs_topology_t t) {
  int n = t != NULL ? hwloc_get_nbobjs_by_type(t->hwloc, HWLOC_OBJ_NUMANODE) : 0;
  return n > 0 ? (size_t)n : 0;
}

uint64_t kvs_topology_memory_bytes(kvs_topology_t t) {
  hwloc_obj_t root = t != NULL ? hwloc_get_root_obj(t->hwloc) : NULL;
  return root != NULL ? (uint64_t)root->total_memory : 0;
}

size_t kvs_topology_package_count(kvs_topology_t t) {
  int n = t != NULL ? hwloc_get_nbobjs_by_type(t->hwloc, HWLOC_OBJ_PACKAGE) : 0;
  return n > 0 ? (size_t)n : 0;
}

struct hwloc_topology *kvs_topology_hwloc(kvs_topology_t t) {
  return t != NULL ? t->hwloc : NULL;
}

struct hwloc_obj *kvs_topology_gpu_locality(kvs_topology_t t, size_t index) {
  return t != NULL && index < t->n_gpus ? t->locality[index] : NULL;
}
