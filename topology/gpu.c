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
  kvs_pci_address a;
  const char *p = text;
  if (text == NULL || !hex_field(&p, 8, &a.domain) || *p++ != ':' ||
      !hex_field(&p, 2, &a.bus) || *p++ != ':' || !hex_field(&p, 2, &a.device) ||
      *p++ != '.' || !hex_field(&p, 1, &a.function) || *p != '\0' || a.device > 0x1f ||
      a.function > 7) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "PCI bus id '%s' is not of the form 0000:07:00.0 "
                         "(domain:bus:device.function, hex)",
                         text == NULL ? "" : text);
  }
  *out = a;
  return KVS_OK;
}

void kvs_pci_address_format(const kvs_pci_address *a, char buf[KVS_PCI_BUSID_LEN]) {
  /* The domain is 16 bits on every machine hwloc and CUDA describe. */
  snprintf(buf, KVS_PCI_BUSID_LEN, "%04x:%02x:%02x.%01x", (unsigned)(a->domain & 0xffffu),
           (unsigned)(a->bus & 0xffu), (unsigned)(a->device & 0x1fu),
           (unsigned)(a->function & 0x7u));
}

int kvs_pci_address_compare(const kvs_pci_address *a, const kvs_pci_address *b) {
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
