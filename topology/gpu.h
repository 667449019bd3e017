/* One GPU as the planner sees it: where it sits on the PCI bus, which
 * NUMA node and package it is local to, and (on a live machine with
 * CUDA) which CUDA device it is and how much memory is free on it.
 *
 * A plain value the topology fills and the placement reads; placement
 * never needs hwloc, so it can be tested from hand-made GPU lists. */
#ifndef KVS_TOPOLOGY_GPU_H
#define KVS_TOPOLOGY_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_PCI_VENDOR_NVIDIA 0x10deu
/* "0000:07:00.0" and its terminating NUL. */
#define KVS_PCI_BUSID_LEN 13
#define KVS_GPU_MODEL_MAX 96
/* A cpuset in list form ("0-55,112-167"); long enough for any real
 * machine's locality set, and checked when filled. */
#define KVS_CPUSET_STRING_MAX 1024

typedef struct kvs_pci_address {
  uint32_t domain;
  uint32_t bus;
  uint32_t device;
  uint32_t function;
} kvs_pci_address;

typedef struct kvs_gpu_info {
  /* Position in the planner's GPU list: the CUDA ordinal on a live
   * machine with CUDA, else the rank in PCI bus id order (which is the
   * CUDA order under CUDA_DEVICE_ORDER=PCI_BUS_ID). */
  size_t index;
  kvs_pci_address pci;
  char pci_busid[KVS_PCI_BUSID_LEN];  /* "0000:07:00.0", lower-case hex */
  uint32_t vendor_id, device_id;      /* 0 when unknown (CUDA-only GPU) */
  char model[KVS_GPU_MODEL_MAX];      /* "" when unknown */
  int numa_node;                      /* os index of the local NUMA node, -1 when unknown */
  int package;                        /* os index of the local package, -1 when unknown */
  char cpuset[KVS_CPUSET_STRING_MAX]; /* local CPUs, list form; "" unknown */
  /* False when CUDA named the GPU but hwloc has no PCI object for it
   * (a container without sysfs): locality is then unknown. */
  bool in_topology;
  int cuda_device;      /* CUDA ordinal, -1 when CUDA was not consulted */
  size_t host;          /* the host (machine) holding it, in cluster order; 0 on one machine */
  uint64_t free_bytes;  /* cudaMemGetInfo, 0 when unknown */
  uint64_t total_bytes; /* cudaMemGetInfo, 0 when unknown */
} kvs_gpu_info;

/* Parses "dddd:bb:dd.f" (hex fields; a domain of up to 8 digits, as
 * nvidia-smi prints, is accepted). text or out NULL is
 * KVS_ERR_INVALID_ARGUMENT naming it. */
kvs_status kvs_pci_address_parse(const char *text, kvs_pci_address *out, kvs_error *err);

/* Writes the canonical "0000:07:00.0" form into buf[KVS_PCI_BUSID_LEN];
 * "" for a NULL address, nothing for a NULL buf. */
void kvs_pci_address_format(const kvs_pci_address *address, char buf[KVS_PCI_BUSID_LEN]);

/* Orders addresses as the PCI bus does (domain, bus, device, function):
 * negative, zero or positive like strcmp; NULL orders first. */
int kvs_pci_address_compare(const kvs_pci_address *a, const kvs_pci_address *b);

/* Whether a PCI function is a GPU the planner places KV on: an NVIDIA
 * device of class display (0x03xx: VGA 0x0300, 3D 0x0302, ...). NVSwitch
 * chips (class 0x0680, a bridge) and other vendors' display adapters
 * (a BMC's VGA) are not. */
bool kvs_pci_is_nvidia_gpu(uint32_t vendor_id, uint32_t class_id);

/* A known GPU model's memory, for planning a machine where nothing can be
 * measured (an XML export, the bundled server): the total its driver
 * reports (nvidia-smi's total, e.g. 143,771 MiB for an H200), not the
 * decimal label ("141 GB" would be 131.3 GiB); gpu.c lists each figure's
 * source. Models are matched by PCI vendor and device id, as the PCI ID
 * Repository names them (pci-ids.ucw.cz). 0 for a model not in the table:
 * the caller must then be told the memory or the budget. *name (may be
 * NULL) gets the model's name, or "". */
uint64_t kvs_gpu_known_memory_bytes(uint32_t vendor_id, uint32_t device_id, const char **name);

#ifdef __cplusplus
}
#endif

#endif /* KVS_TOPOLOGY_GPU_H */
