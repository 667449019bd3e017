#include "shard/cluster_gather.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/mix.h"
#include "plan/node_setup.h"

/* ---- one GPU as reduction words ----
 * Sum-allreduce is the gather: each slot is written by exactly one rank
 * and is zero on every other, so the sum is that rank's words. */
enum {
  G_PCI_HI,   /* domain << 32 | bus */
  G_PCI_LO,   /* device << 32 | function */
  G_IDS,      /* vendor << 32 | device id */
  G_LOCALITY, /* numa << 32 | package, as 32-bit two's complement */
  G_IN_TOPOLOGY,
  G_CUDA_DEVICE,
  G_FREE,  /* measured memory: differs between a machine's ranks, so */
  G_TOTAL, /* these two are left out of the identity digest */
  G_BUSID,
  G_MODEL = G_BUSID + (KVS_PCI_BUSID_LEN + 7) / 8,
  G_CPUSET = G_MODEL + KVS_GPU_MODEL_MAX / 8,
  G_WORDS = G_CPUSET + KVS_CPUSET_STRING_MAX / 8
};

static void put_text(uint64_t *w, const char *text, size_t cap) {
  memset(w, 0, (cap + 7) / 8 * 8);
  memcpy(w, text, strnlen(text, cap - 1));
}

static void get_text(char *text, const uint64_t *w, size_t cap) {
  memcpy(text, w, cap);
  text[cap - 1] = '\0';
}

static void pack_gpu(const kvs_gpu_info *g, uint64_t *w) {
  w[G_PCI_HI] = (uint64_t)g->pci.domain << 32 | g->pci.bus;
  w[G_PCI_LO] = (uint64_t)g->pci.device << 32 | g->pci.function;
  w[G_IDS] = (uint64_t)g->vendor_id << 32 | g->device_id;
  w[G_LOCALITY] = (uint64_t)(uint32_t)g->numa_node << 32 | (uint32_t)g->package;
  w[G_IN_TOPOLOGY] = g->in_topology;
  w[G_CUDA_DEVICE] = (uint64_t)(int64_t)g->cuda_device;
  w[G_FREE] = g->free_bytes;
  w[G_TOTAL] = g->total_bytes;
  put_text(w + G_BUSID, g->pci_busid, KVS_PCI_BUSID_LEN);
  put_text(w + G_MODEL, g->model, KVS_GPU_MODEL_MAX);
  put_text(w + G_CPUSET, g->cpuset, KVS_CPUSET_STRING_MAX);
}

static void unpack_gpu(const uint64_t *w, kvs_gpu_info *g) {
  memset(g, 0, sizeof *g);
  g->pci.domain = (uint32_t)(w[G_PCI_HI] >> 32);
  g->pci.bus = (uint32_t)w[G_PCI_HI];
  g->pci.device = (uint32_t)(w[G_PCI_LO] >> 32);
  g->pci.function = (uint32_t)w[G_PCI_LO];
  g->vendor_id = (uint32_t)(w[G_IDS] >> 32);
  g->device_id = (uint32_t)w[G_IDS];
  g->numa_node = (int)(int32_t)(uint32_t)(w[G_LOCALITY] >> 32);
  g->package = (int)(int32_t)(uint32_t)w[G_LOCALITY];
  g->in_topology = w[G_IN_TOPOLOGY] != 0;
  g->cuda_device = (int)(int64_t)w[G_CUDA_DEVICE];
  g->free_bytes = w[G_FREE];
  g->total_bytes = w[G_TOTAL];
  get_text(g->pci_busid, w + G_BUSID, KVS_PCI_BUSID_LEN);
  get_text(g->model, w + G_MODEL, KVS_GPU_MODEL_MAX);
  get_text(g->cpuset, w + G_CPUSET, KVS_CPUSET_STRING_MAX);
}

/* What a machine's ranks must agree on: every GPU's identity and
 * locality, in order (not the memory each rank measured). */
static uint64_t list_digest(const kvs_gpu_info *gpus, size_t n) {
  uint64_t digest = kvs_mix64(0x6b7673636c757374ull, n);
  uint64_t w[G_WORDS];
  for (size_t i = 0; i < n; i++) {
    pack_gpu(&gpus[i], w);
    w[G_FREE] = w[G_TOTAL] = 0;
    digest = kvs_mix64(digest, XXH64(w, sizeof w, 0));
  }
  return digest;
}

/* ---- the exchange ---- */

enum { MODE_DESCRIBED = 1, MODE_DISCOVERED = 2 };

/* One rank's words in the first round. */
enum {
  A_MODE,
  A_COUNT,
  A_DIGEST,
  A_BOOT, /* this machine's boot id, folded */
  A_HOST,
  A_WORDS = A_HOST + KVS_HOST_NAME_MAX / 8
};
/* A host's label in the second round, before its GPUs. */
enum { LABEL_WORDS = KVS_HOST_LABEL_MAX / 8 };
/* Far above any machine; keeps the second round's size arithmetic exact. */
#define MAX_NODE_GPUS 4096

kvs_status kvs_host_name(char *buf, size_t cap, kvs_error *err) {
  if (buf == NULL || cap == 0) return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "no buffer");
  if (gethostname(buf, cap) != 0) {
    return kvs_error_set(err, KVS_ERR_IO, "gethostname failed: name the host (host)");
  }
  buf[cap - 1] = '\0';
  return KVS_OK;
}

/* The kernel's boot id, folded to a word: two containers that both call
 * themselves "localhost" on two machines differ in it (NCCL keys its hosts
 * the same way), while names given to simulate machines on one machine
 * still tell them apart. 0 where it cannot be read: the name alone. */
static uint64_t boot_id(void) {
  char text[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f == NULL) return 0;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  uint64_t id = XXH64(text, n, 0);
  return id != 0 ? id : 1;
}

static kvs_status check_host(const char *host, kvs_error *err) {
  size_t n = strnlen(host, KVS_HOST_NAME_MAX);
  if (n == 0 || n >= KVS_HOST_NAME_MAX) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "host name '%.32s%s' must be 1 to %d characters", host,
                         n > 32 ? "..." : "", KVS_HOST_NAME_MAX - 1);
  }
  if (host[0] == '-') {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "host name '%.64s' starts with '-', which no host name does (RFC 1123): "
                         "a flag given where the name belongs?",
                         host);
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)host[i];
    if (c <= ' ' || c >= 0x7f) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "host name '%.64s' has character 0x%02x at %zu: printable characters "
                           "without spaces only",
                           host, c, i);
    }
  }
  return KVS_OK;
}

/* What this rank holds before the exchange. */
typedef struct own {
  bool discover;
  char host[KVS_HOST_NAME_MAX];
  uint64_t boot;            /* boot_id() */
  kvs_cluster_t described;  /* described mode */
  kvs_topology_t topology;  /* discovery: this machine's */
  const kvs_gpu_info *gpus; /* the list the ranks compare */
  size_t n_gpus;
} own;

static kvs_status open_own(own *me, const char *topology, size_t hosts, const char *host,
                           char *note, size_t note_cap, kvs_error *err) {
  me->discover = hosts == 0 && (topology == NULL || strchr(topology, ',') == NULL);
  kvs_status status = KVS_OK;
  if (host != NULL) {
    if ((status = check_host(host, err)) != KVS_OK) return status;
    snprintf(me->host, sizeof me->host, "%s", host);
  } else if ((status = kvs_host_name(me->host, sizeof me->host, err)) != KVS_OK) {
    return status;
  } else if ((status = check_host(me->host, err)) != KVS_OK) {
    return status;
  }
  me->boot = boot_id();
  /* A serving rank reads its machine without a context on every GPU: it
   * measures its own GPU when it budgets (shard/node.c). */
  if (!me->discover) {
    status = kvs_cluster_open_spec(topology, hosts, false, &me->described, note, note_cap, err);
    if (status != KVS_OK) return status;
    me->gpus = kvs_cluster_gpus(me->described);
    me->n_gpus = kvs_cluster_gpu_count(me->described);
    return KVS_OK;
  }
  status = kvs_topology_open_spec(topology, false, &me->topology, note, note_cap, err);
  if (status != KVS_OK) return status;
  me->gpus = kvs_topology_gpus(me->topology);
  me->n_gpus = kvs_topology_gpu_count(me->topology);
  if (me->n_gpus > MAX_NODE_GPUS) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "topology '%s' lists %zu GPUs, over %d",
                         kvs_topology_label(me->topology), me->n_gpus, MAX_NODE_GPUS);
  }
  return KVS_OK;
}

/* The plan fills a machine's GPUs before the next machine's: so every
 * machine but the last must run one rank per GPU, and none more ranks
 * than it has GPUs. The machines are blocks of ranks (group_ranks checked
 * it), so machine k runs the ranks from first[k] to the next one's first. */
static kvs_status check_rank_counts(const uint64_t *a, int size, const int *first, size_t n_hosts,
                                    kvs_error *err) {
  if (a[A_MODE] != MODE_DISCOVERED) return KVS_OK;
  for (size_t k = 0; k < n_hosts; k++) {
    size_t ranks = (size_t)((k + 1 < n_hosts ? first[k + 1] : size) - first[k]);
    uint64_t gpus = a[(size_t)first[k] * A_WORDS + A_COUNT];
    if (ranks > gpus || (ranks < gpus && k + 1 < n_hosts)) {
      char host[KVS_HOST_NAME_MAX];
      get_text(host, a + (size_t)first[k] * A_WORDS + A_HOST, sizeof host);
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "host %s runs %zu ranks (from rank %d) on %llu GPUs: %s", host, ranks,
                           first[k], (unsigned long long)gpus,
                           ranks > gpus ? "launch at most one rank per GPU"
                                        : "the plan fills a machine's GPUs before the next "
                                          "machine's, so launch one rank per GPU on every "
                                          "machine but the last, or let all of a machine's "
                                          "ranks see only the GPUs they use "
                                          "(CUDA_VISIBLE_DEVICES, the same for each)");
    }
  }
  return KVS_OK;
}

/* The host that rank runs on: the last whose block starts at or before it. */
static size_t node_of(const int *first, size_t n_hosts, int rank) {
  size_t k = 0;
  while (k + 1 < n_hosts && first[k + 1] <= rank) k++;
  return k;
}

/* The machines the first round's words describe, each by its lowest rank
 * in first[] (none for a described cluster). Refuses ranks that differ on
 * the mode, a described cluster that differs from the leader's, a machine
 * whose ranks are not one block or see different GPUs, too many machines,
 * and rank counts the plan cannot follow. The same words on every rank:
 * every rank decides alike. */
static kvs_status group_ranks(const uint64_t *a, int size, int *first, size_t *n_hosts,
                              kvs_error *err) {
  *n_hosts = 0;
  for (int r = 0; r < size; r++) {
    const uint64_t *w = a + (size_t)r * A_WORDS;
    char host[KVS_HOST_NAME_MAX];
    get_text(host, w + A_HOST, sizeof host);
    if (w[A_MODE] != a[A_MODE]) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "rank %d %s its cluster but rank 0 %s it: every rank must pass the "
                           "same topology and nodes",
                           r, w[A_MODE] == MODE_DISCOVERED ? "discovers" : "describes",
                           a[A_MODE] == MODE_DISCOVERED ? "discovers" : "describes");
    }
    if (w[A_MODE] == MODE_DESCRIBED) {
      if (w[A_COUNT] != a[A_COUNT] || w[A_DIGEST] != a[A_DIGEST]) {
        return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                             "rank %d opened another cluster than rank 0 (%llu GPUs against "
                             "%llu, or other GPUs): every rank must pass the same topology",
                             r, (unsigned long long)w[A_COUNT], (unsigned long long)a[A_COUNT]);
      }
      continue;
    }
    size_t k = 0;
    const uint64_t *rep = NULL;
    char rep_host[KVS_HOST_NAME_MAX] = "";
    for (; k < *n_hosts; k++) {
      rep = a + (size_t)first[k] * A_WORDS;
      get_text(rep_host, rep + A_HOST, sizeof rep_host);
      if (strcmp(rep_host, host) == 0 && rep[A_BOOT] == w[A_BOOT]) break;
    }
    if (k < *n_hosts && k + 1 != *n_hosts) {
      char last[KVS_HOST_NAME_MAX];
      get_text(last, a + (size_t)first[*n_hosts - 1] * A_WORDS + A_HOST, sizeof last);
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "rank %d is on host %s again after rank %d on host %s: launch the "
                           "ranks in blocks, one machine after another (mpirun --map-by "
                           "ppr:GPUS:node, srun --distribution=block)",
                           r, host, r - 1, last);
    }
    if (k == *n_hosts) {
      if (k == KVS_MAX_HOSTS) {
        return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                             "rank %d is on a host beyond the %d nodes a cluster plan holds "
                             "(%s)",
                             r, KVS_MAX_HOSTS, host);
      }
      first[(*n_hosts)++] = r;
    } else if (w[A_COUNT] != rep[A_COUNT] || w[A_DIGEST] != rep[A_DIGEST]) {
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                           "rank %d on host %s sees %llu GPUs and rank %d on the same host sees "
                           "%llu%s: every rank of a machine must see the same GPUs in the same "
                           "order (the same topology; no per-rank CUDA_VISIBLE_DEVICES)",
                           r, host, (unsigned long long)w[A_COUNT], first[k],
                           (unsigned long long)rep[A_COUNT],
                           w[A_COUNT] == rep[A_COUNT] ? " with other identities or locality" : "");
    }
  }
  return check_rank_counts(a, size, first, *n_hosts, err);
}

/* The second round: every host's label and GPUs, written by its lowest
 * rank; then the cluster. */
static kvs_status gather_lists(kvs_comm_t comm, own *me, const uint64_t *a, const int *first,
                               size_t n_hosts, size_t own_host, kvs_cluster_t *out,
                               kvs_error *err) {
  size_t counts[KVS_MAX_HOSTS], offsets[KVS_MAX_HOSTS], total_gpus = 0, total_words = 0;
  for (size_t k = 0; k < n_hosts; k++) {
    counts[k] = (size_t)a[(size_t)first[k] * A_WORDS + A_COUNT];
    offsets[k] = total_words;
    total_words += LABEL_WORDS + counts[k] * G_WORDS;
    total_gpus += counts[k];
  }
  kvs_comm_buffer buffer;
  memset(&buffer, 0, sizeof buffer);
  kvs_status status = kvs_comm_buffer_alloc(comm, total_words * sizeof(uint64_t), &buffer, err);
  if (status != KVS_OK) return status;
  uint64_t *w = buffer.host;
  memset(w, 0, total_words * sizeof *w);
  if (first[own_host] == kvs_comm_rank(comm)) {
    uint64_t *slice = w + offsets[own_host];
    put_text(slice, kvs_topology_label(me->topology), KVS_HOST_LABEL_MAX);
    for (size_t i = 0; i < me->n_gpus; i++)
      pack_gpu(&me->gpus[i], slice + LABEL_WORDS + i * G_WORDS);
  }
  status = kvs_comm_allreduce_u64(comm, &buffer, total_words, KVS_COMM_SUM, err);
  kvs_gpu_info *gpus =
      status == KVS_OK ? calloc(total_gpus > 0 ? total_gpus : 1, sizeof *gpus) : NULL;
  char(*labels)[KVS_HOST_LABEL_MAX] = status == KVS_OK ? calloc(n_hosts, sizeof *labels) : NULL;
  if (status == KVS_OK && (gpus == NULL || labels == NULL)) {
    status = kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for %zu gathered GPUs", total_gpus);
  }
  if (status == KVS_OK) {
    const char *names[KVS_MAX_HOSTS];
    size_t at = 0;
    for (size_t k = 0; k < n_hosts; k++) {
      /* One machine is labelled as kvplan labels it; several by host. */
      char topology_label[KVS_HOST_LABEL_MAX], host[KVS_HOST_NAME_MAX];
      get_text(topology_label, w + offsets[k], sizeof topology_label);
      get_text(host, a + (size_t)first[k] * A_WORDS + A_HOST, sizeof host);
      if (n_hosts == 1) {
        snprintf(labels[k], KVS_HOST_LABEL_MAX, "%s", topology_label);
      } else {
        snprintf(labels[k], KVS_HOST_LABEL_MAX, "%.*s (%.*s)", KVS_HOST_LABEL_MAX / 2 - 2, host,
                 KVS_HOST_LABEL_MAX / 2 - 2, topology_label);
      }
      names[k] = labels[k];
      for (size_t i = 0; i < counts[k]; i++, at++) {
        unpack_gpu(w + offsets[k] + LABEL_WORDS + i * G_WORDS, &gpus[at]);
      }
    }
    status = kvs_cluster_from_lists(n_hosts, counts, gpus, names, own_host, me->topology, out, err);
    if (status == KVS_OK) me->topology = NULL; /* the cluster owns it now */
  }
  free(gpus);
  free(labels);
  kvs_comm_buffer_free(comm, &buffer);
  return status;
}

kvs_status kvs_cluster_gather(kvs_comm_t comm, const char *topology, size_t hosts, const char *host,
                              kvs_cluster_t *out, char *note, size_t note_cap, kvs_error *err) {
  if (comm == NULL || out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "communicator and output are required");
  }
  int size = kvs_comm_size(comm);
  own me;
  memset(&me, 0, sizeof me);
  kvs_error local_err;
  kvs_error_clear(&local_err);
  kvs_status local = open_own(&me, topology, hosts, host, note, note_cap, &local_err);

  size_t a_words = (size_t)size * A_WORDS;
  size_t bytes = a_words * sizeof(uint64_t);
  if (bytes < KVS_COMM_AGREE_BYTES) bytes = KVS_COMM_AGREE_BYTES;
  kvs_comm_buffer buffer;
  memset(&buffer, 0, sizeof buffer);
  kvs_status status = kvs_comm_buffer_alloc(comm, bytes, &buffer, err);
  if (status != KVS_OK) goto done;
  int failed = -1;
  if ((status = kvs_comm_agree(comm, &buffer, local, &local_err, &failed, err)) != KVS_OK) {
    if (failed >= 0) {
      kvs_error inner = *err;
      kvs_error_set(err, status, "rank %d could not join the cluster: %s", failed, inner.message);
    }
    goto done;
  }
  uint64_t *a = buffer.host;
  memset(a, 0, a_words * sizeof *a);
  uint64_t *mine = a + (size_t)kvs_comm_rank(comm) * A_WORDS;
  mine[A_MODE] = me.discover ? MODE_DISCOVERED : MODE_DESCRIBED;
  mine[A_COUNT] = me.n_gpus;
  mine[A_DIGEST] = list_digest(me.gpus, me.n_gpus);
  mine[A_BOOT] = me.boot;
  put_text(mine + A_HOST, me.host, KVS_HOST_NAME_MAX);
  if ((status = kvs_comm_allreduce_u64(comm, &buffer, a_words, KVS_COMM_SUM, err)) != KVS_OK) {
    goto done;
  }
  int first[KVS_MAX_HOSTS];
  size_t n_hosts = 0;
  if ((status = group_ranks(a, size, first, &n_hosts, err)) != KVS_OK) goto done;
  if (!me.discover) {
    *out = me.described;
    me.described = NULL;
    goto done;
  }
  status = gather_lists(comm, &me, a, first, n_hosts, node_of(first, n_hosts, kvs_comm_rank(comm)),
                        out, err);
done:
  kvs_comm_buffer_free(comm, &buffer);
  kvs_cluster_destroy(me.described);
  kvs_topology_destroy(me.topology);
  return status;
}
