/* kvs_device_probe: the first step of tools/device-check.sh, a few seconds
 * that say whether the rest can run and what it runs on. Prints one JSON
 * object: the driver's and the runtime's CUDA versions, NCCL's version (or
 * why it is not there: the check then marks its NCCL steps not run), the
 * device's name, its memory and the largest pitch a 2D copy takes
 * (cudaDevAttrMaxPitch, which a production carve's layer stride passes),
 * and one launch of kvshard's own kernel (a table's create loads every
 * kernel; its digest launches one), timed.
 *   kvs_device_probe [--device N]
 * Exit 0: the kernel ran; 77: no CUDA device; 1: anything else. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cuda/device_tables.h"
#include "plan/device_layout.h"

/* A message inside a JSON string: its quotes and backslashes made plain. */
static const char *plain(char *text) {
  for (char *c = text; *c != '\0'; c++) {
    if (*c == '"' || *c == '\\') *c = '\'';
  }
  return text;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* NCCL's version through dlopen, so a machine without NCCL still gets the
 * rest of the probe. */
static void nccl_version(char *out, size_t size) {
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(out, size, "\"missing\", \"nccl_error\": \"%s\"", dlerror());
    return;
  }
  int (*get)(int *) = (int (*)(int *))dlsym(h, "ncclGetVersion");
  int v = 0;
  if (get == NULL || get(&v) != 0) {
    snprintf(out, size, "\"unknown\"");
  } else {
    snprintf(out, size, "\"%d.%d.%d\"", v / 10000, (v / 100) % 100, v % 100);
  }
}

/* One small table: create (every kernel loaded) and a digest (one launch)
 * read back. */
static int launch_one(int device, char *out, size_t size) {
  kvs_geometry g;
  uint32_t ratios[1] = {0};
  kvs_error err;
  kvs_pool_sizes sizes;
  kvs_device_layout layout;
  kvs_device_tables_t t = NULL;
  if (kvs_geometry_init(&g, 8, 4, 1, ratios, 1, &err) ||
      kvs_pool_sizes_compute(8, &g, 0.5, 128, 4, &sizes, &err) ||
      kvs_device_layout_build(&g, 0, 1, NULL, &sizes, NULL, &layout, &err)) {
    snprintf(out, size, "\"layout: %.300s\"", plain(err.message));
    return 1;
  }
  double t0 = now_ms();
  if (kvs_device_tables_create(device, &layout, &t, &err)) {
    snprintf(out, size, "\"create: %.300s\"", plain(err.message));
    return 1;
  }
  double t1 = now_ms();
  unsigned long long *d = NULL, digest = 0;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaMalloc((void **)&d, sizeof *d);
  kvs_status s = KVS_OK;
  if (e == cudaSuccess) s = kvs_device_tables_digest(t, d, NULL, &err);
  if (e == cudaSuccess && s == KVS_OK) {
    e = cudaMemcpy(&digest, d, sizeof digest, cudaMemcpyDeviceToHost);
  }
  double t2 = now_ms();
  if (d != NULL) (void)cudaFree(d);
  kvs_device_tables_destroy(t);
  if (s != KVS_OK || e != cudaSuccess) {
    snprintf(out, size, "\"digest: %.300s\"",
             s != KVS_OK ? plain(err.message) : cudaGetErrorString(e));
    return 1;
  }
  snprintf(out, size, "\"ok\", \"create_ms\": %.1f, \"kernel_ms\": %.2f, \"digest\": %llu", t1 - t0,
           t2 - t1, digest);
  return 0;
}

int main(int argc, char **argv) {
  int device = 0;
  if (argc == 3 && strcmp(argv[1], "--device") == 0) {
    device = atoi(argv[2]);
  } else if (argc != 1) {
    fprintf(stderr, "usage: kvs_device_probe [--device N]\n");
    return 2;
  }
  double start = now_ms();
  int driver = 0, runtime = 0, count = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  char nccl[320];
  nccl_version(nccl, sizeof nccl);
  cudaError_t e = cudaGetDeviceCount(&count);
  printf("{\"driver\": %d, \"runtime\": %d, \"nccl\": %s, ", driver, runtime, nccl);
  if (e != cudaSuccess || count == 0) {
    printf("\"devices\": 0, \"error\": \"%s\"}\n", cudaGetErrorString(e));
    return 77;
  }
  struct cudaDeviceProp p;
  int pitch = 0;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, device) != cudaSuccess) {
    printf("\"devices\": %d, \"error\": \"device %d: %s\"}\n", count, device,
           cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  char launch[400];
  int rc = launch_one(device, launch, sizeof launch);
  printf(
      "\"devices\": %d, \"device\": %d, \"name\": \"%s\", \"sm\": \"%d.%d\", \"memory_bytes\": "
      "%zu, "
      "\"max_pitch\": %d, \"kernel\": %s, \"probe_ms\": %.1f}\n",
      count, device, p.name, p.major, p.minor, p.totalGlobalMem, pitch, launch, now_ms() - start);
  return rc;
}
