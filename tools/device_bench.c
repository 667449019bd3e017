/* kvs_device_bench: the per-step kernels timed on one GPU, with the bytes
 * each step must move and the bandwidth that achieves (issue 6,
 * Performance).
 *
 *   kvs_device_bench [--json PATH] [--device N] [--ref-gbs 4300] [--quick]
 *
 * Measures, on a table of 2^17 full pages (a 128 MiB mapping, twice an
 * H200's 60 MB L2) with every page bound:
 *   ring_ctx       256 and 4096 requests per step, P = 128, block tables of
 *                  32 blocks of 128 tokens; "hot" repeats one batch, "cold"
 *                  rotates 32 batches whose windows lie on different pages;
 *   apply_journal  1, 64 and 4096 pages per step, entries already on the
 *                  device (the kernel) and from host memory (upload + kernel);
 *   translate, state_locs  2^20 locs / slots per step.
 * per_step_us is the mean over back-to-back launches on one stream (what a
 * serving loop sees: launch-bound when the kernel is shorter than a
 * launch); kernel_us the median of single launches between two events (the
 * GPU time of one step). gbs divides the step's compulsory bytes (each input
 * read once, each output written once) by the better of the two; the device
 * reference is --ref-gbs (4300: an H200's device-to-device copy as measured
 * here) and also a device-to-device copy measured by this program.
 *
 * The first batch of every kernel is checked against its CPU reference
 * (core/device_ref.h) before it is timed. Exit 0 on success, 77 when no
 * CUDA device is visible (the JSON then says why), 1 on any failure. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device_ref.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "plan/device_layout.h"
#include "backends/cuda/device_tables.h"

#define PAGE 128u
#define STRIDE 32u /* blocks per request row */
#define MAX_REQ 4096u
#define FULL_PAGES (MAX_REQ * STRIDE + 1) /* every request owns its pages, + the dummy */
#define WIN_PAGES 8192u
#define ROTATIONS 32u
#define FLAT_ITEMS (1u << 20)

typedef struct options {
  const char *json_path;
  int device;
  double ref_gbs;
  int quick;
} options;

typedef struct timing {
  double per_step_us; /* back-to-back mean */
  double kernel_us;   /* single-launch median */
} timing;

static int fail(const char *what, kvs_status status, const kvs_error *err) {
  fprintf(stderr, "kvs_device_bench: %s failed: %s: %s\n", what, kvs_status_string(status),
          err != NULL ? err->message : "");
  return 1;
}

#define CHECK_CUDA(call, what)                            \
  do {                                                    \
    kvs_error e_;                                         \
    kvs_status s_ = kvs_cuda_status((call), (what), &e_); \
    if (s_ != KVS_OK) {                                   \
      fail((what), s_, &e_);                              \
      exit(1);                                            \
    }                                                     \
  } while (0)

static void *device_alloc(size_t bytes) {
  void *p = NULL;
  CHECK_CUDA(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

static void *host_alloc(size_t bytes) {
  void *p = malloc(bytes);
  if (p == NULL) {
    fprintf(stderr, "kvs_device_bench: out of host memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

/* Landed before return: a plain cudaMemcpy from pageable memory may not
 * have, and the kernels run on a non-blocking stream, which would then
 * verify stale data. */
static void upload(void *d, const void *h, size_t bytes) {
  kvs_error e;
  kvs_status s = kvs_cuda_upload(d, h, bytes, "cudaMemcpy to the device", &e);
  if (s != KVS_OK) {
    fail("an upload", s, &e);
    exit(1);
  }
}

static void download(void *h, const void *d, size_t bytes) {
  CHECK_CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One step of a kernel under test; `rotation` picks the batch. */
typedef kvs_status (*step_fn)(void *ctx, unsigned rotation, cudaStream_t stream, kvs_error *err);

static timing time_steps(step_fn step, void *ctx, unsigned rotations, cudaStream_t stream,
                         int iterations) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start), "cudaEventCreate");
  CHECK_CUDA(cudaEventCreate(&stop), "cudaEventCreate");
  kvs_error err;
  for (int i = 0; i < 20; i++) {
    kvs_status s = step(ctx, (unsigned)i % rotations, stream, &err);
    if (s != KVS_OK) exit(fail("a warm-up step", s, &err));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  /* Back to back: the mean per step of a pipelined stream of launches. */
  CHECK_CUDA(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int i = 0; i < iterations; i++) {
    kvs_status s = step(ctx, (unsigned)i % rotations, stream, &err);
    if (s != KVS_OK) exit(fail("a timed step", s, &err));
  }
  CHECK_CUDA(cudaEventRecord(stop, stream), "cudaEventRecord");
  CHECK_CUDA(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  timing t;
  t.per_step_us = 1000.0 * ms / iterations;
  /* One launch between two events, the stream idle before it. */
  enum { SINGLES = 41 };
  double singles[SINGLES];
  for (int i = 0; i < SINGLES; i++) {
    CHECK_CUDA(cudaEventRecord(start, stream), "cudaEventRecord");
    kvs_status s = step(ctx, (unsigned)i % rotations, stream, &err);
    if (s != KVS_OK) exit(fail("a single step", s, &err));
    CHECK_CUDA(cudaEventRecord(stop, stream), "cudaEventRecord");
    CHECK_CUDA(cudaEventSynchronize(stop), "cudaEventSynchronize");
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    singles[i] = 1000.0 * ms;
  }
  qsort(singles, SINGLES, sizeof singles[0], compare_double);
  t.kernel_us = singles[SINGLES / 2];
  CHECK_CUDA(cudaEventDestroy(start), "cudaEventDestroy");
  CHECK_CUDA(cudaEventDestroy(stop), "cudaEventDestroy");
  return t;
}

/* ---- the table every kernel reads ---- */

typedef struct bench {
  kvs_device_tables_t tables;
  kvs_table_dims dims;
  int64_t *map; /* host copy */
} bench;

static void bench_setup(bench *b, int device) {
  kvs_geometry g;
  uint32_t ratios[1] = {0};
  kvs_error err;
  kvs_status s;
  /* One window-only layer: the tiers are the mapping and a small window. */
  if ((s = kvs_geometry_init(&g, 8, 4, 1, ratios, 1, &err))) exit(fail("geometry", s, &err));
  kvs_pool_sizes sizes;
  if ((s = kvs_pool_sizes_compute(FULL_PAGES, &g, 0.5, PAGE, WIN_PAGES, &sizes, &err))) {
    exit(fail("pool sizes", s, &err));
  }
  kvs_device_layout layout;
  if ((s = kvs_device_layout_build(&g, 0, 1, NULL, &sizes, NULL, &layout, &err))) {
    exit(fail("layout", s, &err));
  }
  if ((s = kvs_device_tables_create(device, &layout, &b->tables, &err))) {
    exit(fail("kvs_device_tables_create", s, &err));
  }
  b->dims = kvs_device_tables_dims(b->tables);
  /* Every full page bound, offsets preserved, window pages reused across
   * full pages (the kernels read the table, they do not police it). */
  size_t rows = (size_t)b->dims.full_token + 1;
  b->map = host_alloc(rows * sizeof *b->map);
  uint64_t usable_win = WIN_PAGES - 1;
  for (uint64_t fp = 0; fp + 1 < FULL_PAGES; fp++) {
    uint64_t wp = (fp * 2654435761u) % usable_win;
    for (uint64_t o = 0; o < PAGE; o++) b->map[fp * PAGE + o] = (int64_t)(wp * PAGE + o);
  }
  for (uint64_t o = 0; o < PAGE; o++) {
    b->map[(FULL_PAGES - 1) * PAGE + o] = (int64_t)((WIN_PAGES - 1) * PAGE + o);
  }
  b->map[rows - 1] = -1;
  if ((s = kvs_device_tables_upload_mapping(b->tables, b->map, rows, &err))) {
    exit(fail("upload of the mapping", s, &err));
  }
}

static int check_faults(bench *b, cudaStream_t stream, const char *after) {
  kvs_device_faults f;
  kvs_error err;
  kvs_status s = kvs_device_tables_faults(b->tables, stream, &f, &err);
  if (s == KVS_OK) s = kvs_device_faults_check(&f, &err);
  if (s != KVS_OK) {
    fprintf(stderr, "kvs_device_bench: faults after %s: %s\n", after, err.message);
    return 1;
  }
  return 0;
}

/* ---- ring context ---- */

typedef struct ring_ctx_case {
  bench *b;
  size_t n_req;
  kvs_block_tables tables; /* device pages */
  int64_t *positions;      /* ROTATIONS batches of n_req, device */
  int64_t *own, *prev, *ring;
} ring_ctx_case;

static kvs_status ring_step(void *ctx, unsigned rotation, cudaStream_t stream, kvs_error *err) {
  ring_ctx_case *c = ctx;
  return kvs_device_tables_ring_ctx(c->b->tables, &c->tables, c->positions + rotation * c->n_req,
                                    c->n_req, c->own, c->prev, c->ring, stream, err);
}

static int equal_rows(const int64_t *a, const int64_t *b, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++) {
    if (a[i] != b[i]) {
      fprintf(stderr, "kvs_device_bench: %s differs from its reference at row %zu: %lld vs %lld\n",
              what, i, (long long)a[i], (long long)b[i]);
      return 0;
    }
  }
  return 1;
}

typedef struct ring_result {
  size_t n_req;
  double bytes;
  timing hot, cold;
  int verified;
} ring_result;

static ring_result run_ring_ctx(bench *b, size_t n_req, cudaStream_t stream, int iterations) {
  ring_result r = {n_req, 0, {0, 0}, {0, 0}, 0};
  size_t n_pages = n_req * STRIDE;
  int32_t *pages = host_alloc(n_pages * sizeof *pages);
  for (size_t i = 0; i < n_pages; i++) pages[i] = (int32_t)i; /* request r owns r*32 .. +31 */
  int64_t *positions = host_alloc(ROTATIONS * n_req * sizeof *positions);
  /* Every window full (pos >= P - 1) and on a different pair of pages per
   * rotation, so the cold run streams the whole mapping through L2. */
  for (unsigned k = 0; k < ROTATIONS; k++) {
    for (size_t q = 0; q < n_req; q++) {
      uint64_t block = 1 + (k + q) % (STRIDE - 1);
      positions[k * n_req + q] = (int64_t)(block * PAGE + (q * 37) % PAGE);
    }
  }
  ring_ctx_case c;
  c.b = b;
  c.n_req = n_req;
  c.tables.pages = device_alloc(n_pages * sizeof *pages);
  c.tables.stride = STRIDE;
  c.tables.block_size = PAGE;
  c.positions = device_alloc(ROTATIONS * n_req * sizeof *positions);
  c.own = device_alloc(n_req * sizeof(int64_t));
  c.prev = device_alloc(n_req * sizeof(int64_t));
  c.ring = device_alloc(n_req * PAGE * sizeof(int64_t));
  upload((void *)c.tables.pages, pages, n_pages * sizeof *pages);
  upload(c.positions, positions, ROTATIONS * n_req * sizeof *positions);

  /* Checked once against the reference before it is timed. */
  kvs_error err;
  kvs_status s = ring_step(&c, 0, stream, &err);
  if (s != KVS_OK) exit(fail("ring_ctx", s, &err));
  CHECK_CUDA(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  int64_t *own = host_alloc(n_req * 8), *prev = host_alloc(n_req * 8);
  int64_t *ring = host_alloc(n_req * PAGE * 8);
  int64_t *ref_own = host_alloc(n_req * 8), *ref_prev = host_alloc(n_req * 8);
  int64_t *ref_ring = host_alloc(n_req * PAGE * 8);
  download(own, c.own, n_req * 8);
  download(prev, c.prev, n_req * 8);
  download(ring, c.ring, n_req * PAGE * 8);
  kvs_block_tables host_tables = {pages, STRIDE, PAGE};
  if ((s = kvs_ref_ring_ctx(b->map, &b->dims, &host_tables, positions, n_req, ref_own, ref_prev,
                            ref_ring, NULL, &err))) {
    exit(fail("kvs_ref_ring_ctx", s, &err));
  }
  r.verified = equal_rows(own, ref_own, n_req, "ring_ctx own") &&
               equal_rows(prev, ref_prev, n_req, "ring_ctx prev") &&
               equal_rows(ring, ref_ring, n_req * PAGE, "ring_ctx ring");

  r.hot = time_steps(ring_step, &c, 1, stream, iterations);
  r.cold = time_steps(ring_step, &c, ROTATIONS, stream, iterations);
  /* position + two block-table entries + P mapping rows read; own, prev
   * and P ring slots written. */
  r.bytes = (double)n_req * (8.0 + 2 * 4.0 + PAGE * 8.0 + (PAGE + 2) * 8.0);

  free(pages);
  free(positions);
  free(own);
  free(prev);
  free(ring);
  free(ref_own);
  free(ref_prev);
  free(ref_ring);
  cudaFree((void *)c.tables.pages);
  cudaFree(c.positions);
  cudaFree(c.own);
  cudaFree(c.prev);
  cudaFree(c.ring);
  return r;
}

/* ---- journal apply ---- */

typedef struct journal_case {
  bench *b;
  size_t n;
  kvs_journal_entry *host;   /* two journals: bind, then free, alternating */
  kvs_journal_entry *device; /* the same, on the device */
} journal_case;

static kvs_status journal_device_step(void *ctx, unsigned rotation, cudaStream_t stream,
                                      kvs_error *err) {
  journal_case *c = ctx;
  return kvs_device_tables_apply_journal_device(c->b->tables, c->device + (rotation % 2) * c->n,
                                                c->n, stream, err);
}

static kvs_status journal_host_step(void *ctx, unsigned rotation, cudaStream_t stream,
                                    kvs_error *err) {
  journal_case *c = ctx;
  return kvs_device_tables_apply_journal(c->b->tables, c->host + (rotation % 2) * c->n, c->n,
                                         stream, err);
}

typedef struct journal_result {
  size_t pages;
  double bytes;
  timing device, host;
  int verified;
} journal_result;

static journal_result run_journal(bench *b, size_t n, cudaStream_t stream, int iterations) {
  journal_result r = {n, 0, {0, 0}, {0, 0}, 0};
  journal_case c = {b, n, host_alloc(2 * n * sizeof(kvs_journal_entry)), NULL};
  /* Distinct full pages spread over the table; the second journal frees
   * what the first bound, so alternating steps keep the table honest. */
  for (size_t i = 0; i < n; i++) {
    uint64_t fp = (i * 7919) % (FULL_PAGES - 1);
    c.host[i].full_page = fp;
    c.host[i].window_page = (int64_t)(i % (WIN_PAGES - 1));
    c.host[n + i].full_page = fp;
    c.host[n + i].window_page = KVS_JOURNAL_FREED;
  }
  c.device = device_alloc(2 * n * sizeof(kvs_journal_entry));
  upload(c.device, c.host, 2 * n * sizeof(kvs_journal_entry));

  /* Checked once: the bind journal from the device, against the reference. */
  kvs_error err;
  kvs_status s = journal_device_step(&c, 0, stream, &err);
  if (s != KVS_OK) exit(fail("apply_journal", s, &err));
  size_t rows = (size_t)b->dims.full_token + 1;
  int64_t *device_map = host_alloc(rows * 8);
  if ((s = kvs_device_tables_download_mapping(b->tables, device_map, rows, &err))) {
    exit(fail("download of the mapping", s, &err));
  }
  if ((s = kvs_ref_apply_journal(b->map, &b->dims, c.host, n, NULL, &err))) {
    exit(fail("kvs_ref_apply_journal", s, &err));
  }
  r.verified = equal_rows(device_map, b->map, rows, "apply_journal table");
  free(device_map);

  r.device = time_steps(journal_device_step, &c, 2, stream, iterations);
  r.host = time_steps(journal_host_step, &c, 2, stream, iterations);
  /* Entries read, P rows written per page (the later-entry scan reads the
   * journal again from L2 and is not counted). */
  r.bytes = (double)n * (16.0 + PAGE * 8.0);
  /* Leave the host copy equal to the device table: an even number of
   * alternating steps ran after the check, ending on the free journal. */
  CHECK_CUDA(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if ((s = kvs_device_tables_upload_mapping(b->tables, b->map, rows, &err))) {
    exit(fail("upload of the mapping", s, &err));
  }
  free(c.host);
  cudaFree(c.device);
  return r;
}

/* ---- translate and state locs ---- */

typedef struct flat_case {
  bench *b;
  int64_t *in, *out_a, *out_b;
} flat_case;

static kvs_status translate_step(void *ctx, unsigned rotation, cudaStream_t stream,
                                 kvs_error *err) {
  (void)rotation;
  flat_case *c = ctx;
  return kvs_device_tables_translate(c->b->tables, c->in, FLAT_ITEMS, c->out_a, stream, err);
}

static kvs_status state_step(void *ctx, unsigned rotation, cudaStream_t stream, kvs_error *err) {
  (void)rotation;
  flat_case *c = ctx;
  return kvs_device_tables_state_locs(c->b->tables, c->in, FLAT_ITEMS, c->out_a, c->out_b, stream,
                                      err);
}

typedef struct flat_result {
  timing translate, state;
  int verified;
} flat_result;

static flat_result run_flat(bench *b, cudaStream_t stream, int iterations) {
  flat_result r;
  memset(&r, 0, sizeof r);
  size_t bytes = FLAT_ITEMS * sizeof(int64_t);
  int64_t *locs = host_alloc(bytes), *slots = host_alloc(bytes);
  int64_t *ref = host_alloc(bytes), *ref_b = host_alloc(bytes), *got = host_alloc(bytes);
  /* Whole pages of locs, as a step's batch has them, from across the table. */
  for (size_t i = 0; i < FLAT_ITEMS; i++) {
    uint64_t fp = ((i / PAGE) * 104729) % (FULL_PAGES - 1);
    locs[i] = (int64_t)(fp * PAGE + i % PAGE);
  }
  flat_case c = {b, device_alloc(bytes), device_alloc(bytes), device_alloc(bytes)};
  upload(c.in, locs, bytes);
  kvs_error err;
  kvs_status s = translate_step(&c, 0, stream, &err);
  if (s != KVS_OK) exit(fail("translate", s, &err));
  CHECK_CUDA(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  download(got, c.out_a, bytes);
  if ((s = kvs_ref_translate(b->map, &b->dims, locs, FLAT_ITEMS, ref, NULL, &err))) {
    exit(fail("kvs_ref_translate", s, &err));
  }
  r.verified = equal_rows(got, ref, FLAT_ITEMS, "translate");
  r.translate = time_steps(translate_step, &c, 1, stream, iterations);

  memcpy(slots, ref, bytes); /* the translated slots */
  upload(c.in, slots, bytes);
  if ((s = state_step(&c, 0, stream, &err))) exit(fail("state_locs", s, &err));
  CHECK_CUDA(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if ((s = kvs_ref_state_locs(&b->dims, slots, FLAT_ITEMS, ref, ref_b, NULL, &err))) {
    exit(fail("kvs_ref_state_locs", s, &err));
  }
  download(got, c.out_a, bytes);
  r.verified = r.verified && equal_rows(got, ref, FLAT_ITEMS, "state_locs (ratio 4)");
  download(got, c.out_b, bytes);
  r.verified = r.verified && equal_rows(got, ref_b, FLAT_ITEMS, "state_locs (ratio 128)");
  r.state = time_steps(state_step, &c, 1, stream, iterations);

  free(locs);
  free(slots);
  free(ref);
  free(ref_b);
  free(got);
  cudaFree(c.in);
  cudaFree(c.out_a);
  cudaFree(c.out_b);
  return r;
}

/* ---- the device's own bandwidth ---- */

static double measure_copy_gbs(cudaStream_t stream) {
  size_t bytes = (size_t)1 << 30;
  void *a = NULL, *b = NULL;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    cudaFree(a);
    return 0; /* not enough memory for the probe: reported as 0 */
  }
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start), "cudaEventCreate");
  CHECK_CUDA(cudaEventCreate(&stop), "cudaEventCreate");
  CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "copy");
  CHECK_CUDA(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int i = 0; i < 10; i++) {
    CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "copy");
  }
  CHECK_CUDA(cudaEventRecord(stop, stream), "cudaEventRecord");
  CHECK_CUDA(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  /* Read and written: the convention the 4.3 TB/s H200 figure uses. */
  return 2.0 * 10 * (double)bytes / (ms * 1e-3) / 1e9;
}

/* ---- output ---- */

static double gbs(double bytes, timing t) {
  double us = t.per_step_us < t.kernel_us ? t.per_step_us : t.kernel_us;
  return us > 0 ? bytes / (us * 1e-6) / 1e9 : 0;
}

static void json_timing(FILE *f, const char *name, timing t, double bytes, double ref_gbs,
                        double copy_gbs, const char *tail) {
  double g = gbs(bytes, t);
  fprintf(f,
          "\"%s\": {\"per_step_us\": %.3f, \"kernel_us\": %.3f, \"gbs\": %.1f, "
          "\"fraction_of_ref\": %.3f, \"fraction_of_copy\": %.3f}%s",
          name, t.per_step_us, t.kernel_us, g, ref_gbs > 0 ? g / ref_gbs : 0,
          copy_gbs > 0 ? g / copy_gbs : 0, tail);
}

static int write_skip(const options *o, const char *reason) {
  FILE *f = o->json_path != NULL ? fopen(o->json_path, "w") : stdout;
  if (f == NULL) return 1;
  fprintf(f, "{\"skipped\": true, \"reason\": \"");
  for (const char *p = reason; *p; p++) fputc(*p == '"' ? '\'' : *p, f);
  fprintf(f, "\"}\n");
  if (f != stdout) fclose(f);
  return 0;
}

static int parse(int argc, char **argv, options *o) {
  o->json_path = NULL;
  o->device = 0;
  o->ref_gbs = 4300;
  o->quick = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      o->json_path = argv[++i];
    } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      o->device = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--ref-gbs") == 0 && i + 1 < argc) {
      o->ref_gbs = atof(argv[++i]);
    } else if (strcmp(argv[i], "--quick") == 0) {
      o->quick = 1;
    } else {
      fprintf(stderr,
              "usage: kvs_device_bench [--json PATH] [--device N] [--ref-gbs GBS] [--quick]\n");
      return 0;
    }
  }
  return 1;
}

/* ---- the device ---- */

typedef struct device_info {
  char name[256];
  int major, minor, sms, bus_bits, mem_khz, l2;
  double peak_gbs; /* from the memory clock and bus width; 0 when the clock is unknown */
} device_info;

/* Makes o->device current and reads what the report quotes of it. */
static void open_device(const options *o, device_info *d) {
  CHECK_CUDA(cudaSetDevice(o->device), "cudaSetDevice");
  d->name[0] = '\0';
  d->major = d->minor = d->sms = d->bus_bits = d->mem_khz = d->l2 = 0;
  struct cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, o->device), "cudaGetDeviceProperties");
  snprintf(d->name, sizeof d->name, "%s", prop.name);
  CHECK_CUDA(cudaDeviceGetAttribute(&d->major, cudaDevAttrComputeCapabilityMajor, o->device),
             "attr");
  CHECK_CUDA(cudaDeviceGetAttribute(&d->minor, cudaDevAttrComputeCapabilityMinor, o->device),
             "attr");
  CHECK_CUDA(cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, o->device), "attr");
  CHECK_CUDA(cudaDeviceGetAttribute(&d->bus_bits, cudaDevAttrGlobalMemoryBusWidth, o->device),
             "attr");
  CHECK_CUDA(cudaDeviceGetAttribute(&d->l2, cudaDevAttrL2CacheSize, o->device), "attr");
  /* Not every driver reports the memory clock: the peak is then 0, not a
   * failure. */
  if (cudaDeviceGetAttribute(&d->mem_khz, cudaDevAttrMemoryClockRate, o->device) != cudaSuccess) {
    (void)cudaGetLastError();
    d->mem_khz = 0;
  }
  /* Double data rate: two transfers per memory clock. */
  d->peak_gbs = 2.0 * d->mem_khz * 1e3 * (d->bus_bits / 8.0) / 1e9;
}

/* ---- the whole run ---- */

typedef struct results {
  double copy_gbs; /* this program's device-to-device copy */
  int iterations;
  ring_result rings[2];       /* 256 and 4096 requests */
  journal_result journals[3]; /* 1, 64 and 4096 pages */
  flat_result flat;
  int faulted, verified;
} results;

/* Every kernel's cases, then the device's fault flags over all of them. */
static void run_all(bench *b, cudaStream_t stream, results *r) {
  const size_t batches[2] = {256, 4096};
  for (int i = 0; i < 2; i++) r->rings[i] = run_ring_ctx(b, batches[i], stream, r->iterations);
  const size_t pages[3] = {1, 64, 4096};
  for (int i = 0; i < 3; i++) r->journals[i] = run_journal(b, pages[i], stream, r->iterations);
  /* A quarter of the iterations, 20 at least: each flat step is 2^20 items. */
  r->flat = run_flat(b, stream, r->iterations / 4 > 20 ? r->iterations / 4 : 20);
  r->faulted = check_faults(b, stream, "the benchmark");
  r->verified = !r->faulted && r->flat.verified;
  for (int i = 0; i < 2; i++) r->verified = r->verified && r->rings[i].verified;
  for (int i = 0; i < 3; i++) r->verified = r->verified && r->journals[i].verified;
}

/* ---- output ---- */

/* The 4096-request cold ring context's bandwidth as a share of --ref-gbs. */
static double large_fraction(const options *o, const results *r) {
  return o->ref_gbs > 0 ? gbs(r->rings[1].bytes, r->rings[1].cold) / o->ref_gbs : 0;
}

static void json_rings(FILE *f, const options *o, const results *r) {
  fprintf(f, "  \"ring_ctx\": [\n");
  for (int i = 0; i < 2; i++) {
    const ring_result *x = &r->rings[i];
    fprintf(f, "    {\"requests\": %zu, \"page\": %u, \"bytes_per_step\": %.0f, ", x->n_req, PAGE,
            x->bytes);
    json_timing(f, "hot", x->hot, x->bytes, o->ref_gbs, r->copy_gbs, ", ");
    json_timing(f, "cold", x->cold, x->bytes, o->ref_gbs, r->copy_gbs, ", ");
    fprintf(f, "\"verified\": %s}%s\n", x->verified ? "true" : "false", i < 1 ? "," : "");
  }
  fprintf(f, "  ],\n");
}

static void json_journals(FILE *f, const options *o, const results *r) {
  fprintf(f, "  \"apply_journal\": [\n");
  for (int i = 0; i < 3; i++) {
    const journal_result *x = &r->journals[i];
    fprintf(f, "    {\"pages\": %zu, \"bytes_per_step\": %.0f, ", x->pages, x->bytes);
    json_timing(f, "device_entries", x->device, x->bytes, o->ref_gbs, r->copy_gbs, ", ");
    json_timing(f, "host_entries", x->host, x->bytes, o->ref_gbs, r->copy_gbs, ", ");
    fprintf(f, "\"verified\": %s}%s\n", x->verified ? "true" : "false", i < 2 ? "," : "");
  }
  fprintf(f, "  ],\n");
}

static void json_flat(FILE *f, const options *o, const results *r) {
  double translate_bytes = FLAT_ITEMS * 24.0, state_bytes = FLAT_ITEMS * 24.0;
  fprintf(f, "  \"translate\": {\"items\": %u, \"bytes_per_step\": %.0f, ", FLAT_ITEMS,
          translate_bytes);
  json_timing(f, "timing", r->flat.translate, translate_bytes, o->ref_gbs, r->copy_gbs, "},\n");
  fprintf(f, "  \"state_locs\": {\"items\": %u, \"bytes_per_step\": %.0f, ", FLAT_ITEMS,
          state_bytes);
  json_timing(f, "timing", r->flat.state, state_bytes, o->ref_gbs, r->copy_gbs, "},\n");
}

/* The aims: launch-bound (a few us) at small batches, over 60% of
 * the device's bandwidth at large ones. Reported, not enforced. */
static void json_aims(FILE *f, const options *o, const results *r) {
  double small_us = r->rings[0].hot.per_step_us;
  double large = large_fraction(o, r);
  fprintf(f,
          "  \"aims\": {\"ring_ctx_256_per_step_us\": %.3f, \"small_launch_bound\": %s, "
          "\"ring_ctx_4096_cold_fraction_of_ref\": %.3f, \"large_over_60_percent\": %s},\n",
          small_us, small_us < 10.0 ? "true" : "false", large, large > 0.6 ? "true" : "false");
}

/* The JSON report, to --json PATH or stdout. Returns 0, or 1 after a
 * message when PATH cannot be opened. */
static int write_report(const options *o, const device_info *d, const results *r) {
  FILE *f = o->json_path != NULL ? fopen(o->json_path, "w") : stdout;
  if (f == NULL) {
    fprintf(stderr, "kvs_device_bench: cannot write %s\n", o->json_path);
    return 1;
  }
  fprintf(f, "{\n  \"skipped\": false,\n");
  fprintf(f,
          "  \"device\": {\"name\": \"%s\", \"sm\": \"%d.%d\", \"multiprocessors\": %d, "
          "\"l2_bytes\": %d, \"peak_gbs\": %.0f, \"copy_gbs\": %.0f},\n",
          d->name, d->major, d->minor, d->sms, d->l2, d->peak_gbs, r->copy_gbs);
  fprintf(f, "  \"ref_gbs\": %.0f,\n  \"iterations\": %d,\n", o->ref_gbs, r->iterations);
  json_rings(f, o, r);
  json_journals(f, o, r);
  json_flat(f, o, r);
  json_aims(f, o, r);
  fprintf(f, "  \"faults\": %s,\n  \"verified\": %s\n}\n", r->faulted ? "true" : "false",
          r->verified ? "true" : "false");
  if (f != stdout) fclose(f);
  return 0;
}

/* Two lines on stderr for a reader without the JSON. */
static void print_summary(const options *o, const results *r) {
  const ring_result *small = &r->rings[0], *large = &r->rings[1];
  const journal_result *j = r->journals;
  fprintf(stderr,
          "kvs_device_bench: ring_ctx 256: %.2f us/step (kernel %.2f us); 4096 cold: %.2f us/step "
          "(kernel %.2f us), %.0f GB/s = %.0f%% of %.0f\n",
          small->hot.per_step_us, small->hot.kernel_us, large->cold.per_step_us,
          large->cold.kernel_us, gbs(large->bytes, large->cold), 100 * large_fraction(o, r),
          o->ref_gbs);
  fprintf(stderr,
          "kvs_device_bench: apply_journal 1/64/4096 pages: %.2f / %.2f / %.2f us/step from "
          "device entries, %.2f / %.2f / %.2f from host entries\n",
          j[0].device.per_step_us, j[1].device.per_step_us, j[2].device.per_step_us,
          j[0].host.per_step_us, j[1].host.per_step_us, j[2].host.per_step_us);
}

int main(int argc, char **argv) {
  options o;
  if (!parse(argc, argv, &o)) return 1;
  int count = 0;
  kvs_error err;
  if (kvs_cuda_device_count(&count, &err) != KVS_OK) {
    fprintf(stderr, "kvs_device_bench: skipped: %s\n", err.message);
    write_skip(&o, err.message);
    return 77;
  }
  device_info d;
  open_device(&o, &d);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  results r;
  r.copy_gbs = measure_copy_gbs(stream);
  r.iterations = o.quick ? 100 : 1000;
  fprintf(stderr, "kvs_device_bench: %s (sm_%d%d, %d SMs), copy %.0f GB/s, peak %.0f GB/s\n",
          d.name, d.major, d.minor, d.sms, r.copy_gbs, d.peak_gbs);

  bench b;
  bench_setup(&b, o.device);
  run_all(&b, stream, &r);
  if (write_report(&o, &d, &r) != 0) return 1;
  print_summary(&o, &r);
  kvs_device_tables_destroy(b.tables);
  free(b.map);
  cudaStreamDestroy(stream);
  if (!r.verified) {
    fprintf(stderr, "kvs_device_bench: a kernel disagreed with its reference or faulted\n");
    return 1;
  }
  return 0;
}
