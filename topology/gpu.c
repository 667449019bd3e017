#include "topology/gpu.h"

#include <stdio.h>
#include <string.h>

/* Reads up to max_digits hex digits; false when there are none or more. */
static bool hex_field(const char **at, size_t max_digits, uint32_t *out) {
  uint32_t value = 0;
  size_t digits = 0;
  for (const char *p = *at;; p++) {
    int d;
    if (*p >= '0' && *p <= '9') {
      d = *p - '0';
    } else if (*p >= 'a' && *p <= 'f') {
      d = *p - 'a' + 10;
    } else if (*p >= 'A' && *p <= 'F') {
      d = *p - 'A' + 10;
    } else {
      break;
    }
    if (++digits > max_digits) return false;
    value = value * 16 + (uint32_t)d;
  }
  if (digits == 0) return false;
  *at += digits;
  *out = value;
  return true;
}

kvs_status kvs_pci_address_parse(const char *text, kvs_pci_address *out, kvs_error *err) {
  if (text == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: text is NULL", __func__);
  }
  if (out == NULL) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "%s: out is NULL", __func__);
  }
  kvs_pci_address a;
  const char *p = text;
  if (!hex_field(&p, 8, &a.domain) || *p++ != ':' || !hex_field(&p, 2, &a.bus) || *p++ != ':' ||
      !hex_field(&p, 2, &a.device) || *p++ != '.' || !hex_field(&p, 1, &a.function) || *p != '\0' ||
      a.device > 0x1f || a.function > 7) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "PCI bus id '%s' is not of the form 0000:07:00.0 "
                         "(domain:bus:device.function, hex)",
                         text);
  }
  *out = a;
  return KVS_OK;
}

void kvs_pci_address_format(const kvs_pci_address *a, char buf[KVS_PCI_BUSID_LEN]) {
  if (buf == NULL) return;
  if (a == NULL) {
    buf[0] = '\0';
    return;
  }
  /* The domain is 16 bits on every machine hwloc and CUDA describe. */
  snprintf(buf, KVS_PCI_BUSID_LEN, "%04x:%02x:%02x.%01x", (unsigned)(a->domain & 0xffffu),
           (unsigned)(a->bus & 0xffu), (unsigned)(a->device & 0x1fu),
           (unsigned)(a->function & 0x7u));
}

int kvs_pci_address_compare(const kvs_pci_address *a, const kvs_pci_address *b) {
  /* NULL orders before every address, as an empty string would. */
  if (a == NULL || b == NULL) return (a != NULL) - (b != NULL);
  const uint32_t left[4] = {a->domain, a->bus, a->device, a->function};
  const uint32_t right[4] = {b->domain, b->bus, b->device, b->function};
  for (size_t i = 0; i < 4; i++) {
    if (left[i] != right[i]) return left[i] < right[i] ? -1 : 1;
  }
  return 0;
}

bool kvs_pci_is_nvidia_gpu(uint32_t vendor_id, uint32_t class_id) {
  return vendor_id == KVS_PCI_VENDOR_NVIDIA && (class_id >> 8) == 0x03u;
}

/* NVIDIA data-center parts as the PCI ID Repository names them, with the
 * total memory their driver reports (nvidia-smi's "Memory-Usage" total,
 * in MiB), not the decimal label: an "H200 141GB" reports 143,771 MiB
 * (140.40 GiB), so budgeting 141e9 bytes (131.32 GiB) under-planned it by
 * 9 GiB. Only parts whose name fixes the memory size are here. Sources of
 * each total, as printed by nvidia-smi on such a part:
 *   H200 SXM 141GB   143771 MiB  kvshard issue 24, and "~140.4 GB/GPU" in
 *                                SemiAnalysisAI/InferenceX#2128 (8 x H200)
 *   H100 SXM5 80GB    81559 MiB  NVIDIA/nccl#1264 ("H100 80GB HBM3",
 *                                driver 550.54.15)
 *   H100 NVL 94GB     95830 MiB  NVIDIA/gpu-admin-tools#4 (driver 535.183.01)
 *   A100 SXM4 80GB    81920 MiB  dexmal/dexbotic#41 (A800-SXM4-80GB, the
 *                                same board, driver 535.86.10)
 *   A100 SXM4 40GB    40536 MiB  nanopool/phoenix-miner#17 (driver 470.82.01)
 *   V100 SXM3 32GB    32480 MiB  nvidia-smi on V100 32GB HBM2 (the PCIe
 *                                board's figure, blog.cachecha.com nvidia-smi
 *                                walk-through, driver 410.48)
 *   Tesla M2070        5375 MiB  6 GiB less the eighth ECC reserves (no
 *                                driver printout found: derived, stated)
 * A driver may report a few hundred MiB less on older releases (an A100
 * 80GB printed 81252 MiB on 450.191.01); measured memory, where CUDA sees
 * the GPU, always takes precedence over this table. */
#define MIB (UINT64_C(1) << 20)
static const struct known_gpu {
  uint32_t device_id;
  const char *name;
  uint64_t bytes;
} kKnownGpus[] = {
    {0x06d2, "Tesla M2070", 5375 * MIB},      {0x1db8, "Tesla V100 SXM3 32GB", 32480 * MIB},
    {0x20b0, "A100 SXM4 40GB", 40536 * MIB},  {0x20b2, "A100 SXM4 80GB", 81920 * MIB},
    {0x2321, "H100 NVL 94GB", 95830 * MIB},   {0x2330, "H100 SXM5 80GB", 81559 * MIB},
    {0x2335, "H200 SXM 141GB", 143771 * MIB},
};

uint64_t kvs_gpu_known_memory_bytes(uint32_t vendor_id, uint32_t device_id, const char **name) {
  if (name != NULL) *name = "";
  if (vendor_id != KVS_PCI_VENDOR_NVIDIA) return 0;
  for (size_t i = 0; i < sizeof kKnownGpus / sizeof kKnownGpus[0]; i++) {
    if (kKnownGpus[i].device_id == device_id) {
      if (name != NULL) *name = kKnownGpus[i].name;
      return kKnownGpus[i].bytes;
    }
  }
  return 0;
}
