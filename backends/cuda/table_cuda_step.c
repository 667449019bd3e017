/* The node's step on a GPU; see table_cuda_step.h.
 *
 * Step k uses side k % 2 of everything: the message buffer (the shard's
 * double-buffered communicator buffer, or the table's own staging with a
 * host communicator), the batch staging and its device copy, the results,
 * the events and the graph. Why no host round trip is needed:
 *   - the batch staging of side q is rewritten by the host at step k only
 *     after it saw broadcast k complete (the control plane); broadcast k
 *     was queued after the communicator's stream waited for side q's step
 *     k - 2 (queued at step k - 1, below), whose graph read that staging;
 *   - the device work of step k waits for the broadcast that wrote its
 *     message (an event on the communicator's stream) and, with an engine
 *     stream, for the engine's work queued before step k - 1 returned,
 *     which is what read side q's results of step k - 2;
 *   - the communicator's next collective, broadcast k + 1, rewrites side
 *     1 - q's message: it waits (on the device) for step k - 1.
 * Every kernel reads its count from device memory (the message's count
 * field, the batch's count word) over a grid sized for capacity, so a side's
 * work is the same every step and is captured once as a graph. */
#include "backends/cuda/table_cuda_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "core/clock.h"
#include "shard/step_message.h"

/* One parity. The batch is one block, copied whole (a fixed size, as a
 * graph's copy node is): [count word][positions][slots][blocks x 2]. */
typedef struct step_side {
  unsigned char *h_batch, *d_batch;
  unsigned char *h_message, *d_message; /* host communicators only */
  int64_t *own, *prev, *ring, *csa, *hca;
  cudaEvent_t ready;       /* on the communicator's stream: the broadcast landed */
  cudaEvent_t done;        /* on the table's stream: this side's step is done */
  cudaEvent_t engine_read; /* on the engine's stream: its reads of these results */
  bool done_recorded, engine_read_recorded;
  cudaGraphExec_t exec;
  const void *exec_message; /* the message the graph was captured reading */
} step_side;

struct cuda_step {
  cuda_step_setup s;
  size_t batch_bytes, message_bytes;
  step_side side[2];
  /* The engine's result buffers (has_into): every step's results are
   * copied there, after the engine's reads of the step before (into_read:
   * its release, or its stream when the step was called). */
  kvs_table_results into;
  bool has_into, explicit_release;
  cudaEvent_t into_read;
  bool into_read_recorded;
  unsigned long long *d_digest, *h_digest;
  cudaEvent_t digest_done;
};

static size_t positions_at(void) { return sizeof(uint64_t); }
static size_t slots_at(size_t rows) { return positions_at() + rows * sizeof(int64_t); }
static size_t blocks_at(size_t rows) { return slots_at(rows) + rows * sizeof(int64_t); }

/* ---- create / destroy ---- */

static void destroy_side(step_side *side) {
  if (side->exec != NULL) (void)cudaGraphExecDestroy(side->exec);
  if (side->ready != NULL) (void)cudaEventDestroy(side->ready);
  if (side->done != NULL) (void)cudaEventDestroy(side->done);
  if (side->engine_read != NULL) (void)cudaEventDestroy(side->engine_read);
  (void)cudaFreeHost(side->h_batch);
  (void)cudaFreeHost(side->h_message);
  (void)cudaFree(side->d_batch);
  (void)cudaFree(side->d_message);
  (void)cudaFree(side->own);
  (void)cudaFree(side->prev);
  (void)cudaFree(side->ring);
  (void)cudaFree(side->csa);
  (void)cudaFree(side->hca);
}

void kvs_cuda_step_destroy(cuda_step *step) {
  if (step == NULL) return;
  for (int q = 0; q < 2; q++) destroy_side(&step->side[q]);
  if (step->digest_done != NULL) (void)cudaEventDestroy(step->digest_done);
  if (step->into_read != NULL) (void)cudaEventDestroy(step->into_read);
  (void)cudaFree(step->d_digest);
  (void)cudaFreeHost(step->h_digest);
  free(step);
}

static kvs_status create_side(cuda_step *step, step_side *side, kvs_error *err) {
  const size_t rows = step->s.max_rows, page = (size_t)step->s.dims.page;
  kvs_status status = KVS_OK;
  char what[160];
  snprintf(what, sizeof what, "the step buffers of %zu rows on device %d", rows, step->s.device);
  KVS_CUDA_GOTO(cudaMallocHost((void **)&side->h_batch, step->batch_bytes), what, err, status, out);
  KVS_CUDA_GOTO(cudaMalloc((void **)&side->d_batch, step->batch_bytes), what, err, status, out);
  if (step->s.options.comm_stream == NULL) {
    KVS_CUDA_GOTO(cudaMallocHost((void **)&side->h_message, step->message_bytes), what, err, status,
                  out);
    KVS_CUDA_GOTO(cudaMalloc((void **)&side->d_message, step->message_bytes), what, err, status,
                  out);
  }
  KVS_CUDA_GOTO(cudaMalloc((void **)&side->own, rows * sizeof(int64_t)), what, err, status, out);
  KVS_CUDA_GOTO(cudaMalloc((void **)&side->prev, rows * sizeof(int64_t)), what, err, status, out);
  KVS_CUDA_GOTO(cudaMalloc((void **)&side->ring, rows * page * sizeof(int64_t)), what, err, status,
                out);
  KVS_CUDA_GOTO(cudaMalloc((void **)&side->csa, rows * sizeof(int64_t)), what, err, status, out);
  KVS_CUDA_GOTO(cudaMalloc((void **)&side->hca, rows * sizeof(int64_t)), what, err, status, out);
  KVS_CUDA_GOTO(cudaEventCreateWithFlags(&side->ready, cudaEventDisableTiming), what, err, status,
                out);
  KVS_CUDA_GOTO(cudaEventCreateWithFlags(&side->done, cudaEventDisableTiming), what, err, status,
                out);
  KVS_CUDA_GOTO(cudaEventCreateWithFlags(&side->engine_read, cudaEventDisableTiming), what, err,
                status, out);
  memset(side->h_batch, 0, step->batch_bytes);
out:
  return status;
}

kvs_status kvs_cuda_step_create(const cuda_step_setup *setup, cuda_step **out, uint64_t *bytes,
                                kvs_error *err) {
  if (setup == NULL || out == NULL || bytes == NULL || setup->max_rows == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "the step needs its setup and outputs");
  }
  cuda_step *step = calloc(1, sizeof *step);
  if (step == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory for the step");
  step->s = *setup;
  const size_t rows = setup->max_rows;
  step->batch_bytes = blocks_at(rows) + 2 * rows * sizeof(int32_t);
  step->message_bytes = kvs_step_message_bytes(setup->options.step_capacity);
  kvs_status status = KVS_OK;
  for (int q = 0; q < 2 && status == KVS_OK; q++) status = create_side(step, &step->side[q], err);
  if (status == KVS_OK) {
    status = kvs_cuda_status(cudaMalloc((void **)&step->d_digest, sizeof *step->d_digest),
                             "cudaMalloc of the digest word", err);
  }
  if (status == KVS_OK) {
    status = kvs_cuda_status(cudaMallocHost((void **)&step->h_digest, sizeof *step->h_digest),
                             "cudaMallocHost of the digest word", err);
  }
  if (status == KVS_OK) {
    status = kvs_cuda_status(cudaEventCreateWithFlags(&step->digest_done, cudaEventDisableTiming),
                             "cudaEventCreateWithFlags for the digest", err);
  }
  if (status == KVS_OK) {
    status = kvs_cuda_status(cudaEventCreateWithFlags(&step->into_read, cudaEventDisableTiming),
                             "cudaEventCreateWithFlags for the engine's result buffers", err);
  }
  if (status != KVS_OK) {
    kvs_cuda_step_destroy(step);
    return status;
  }
  uint64_t per_side = step->batch_bytes + rows * (4 + (size_t)setup->dims.page) * sizeof(int64_t);
  if (setup->options.comm_stream == NULL) per_side += step->message_bytes;
  *bytes = 2 * per_side + sizeof *step->d_digest;
  *out = step;
  return KVS_OK;
}

/* ---- one step ---- */

/* The side's work, as queued on the table's stream (and as captured). */
static kvs_status enqueue_work(cuda_step *step, step_side *side, const void *message,
                               kvs_error *err) {
  cudaStream_t st = step->s.stream;
  const size_t rows = step->s.max_rows;
  kvs_status status = KVS_OK;
  if (side->h_message != NULL) {
    KVS_CUDA_GOTO(cudaMemcpyAsync(side->d_message, side->h_message, step->message_bytes,
                                  cudaMemcpyHostToDevice, st),
                  "cudaMemcpyAsync of the step message", err, status, out);
  }
  KVS_CUDA_GOTO(
      cudaMemcpyAsync(side->d_batch, side->h_batch, step->batch_bytes, cudaMemcpyHostToDevice, st),
      "cudaMemcpyAsync of the step's rows", err, status, out);
  status = kvs_device_tables_apply_counted(step->s.tables, kvs_step_message_entries_of(message),
                                           step->s.options.step_capacity,
                                           kvs_step_message_count_field(message), st, err);
  if (status != KVS_OK) goto out;
  const uint64_t *count = (const uint64_t *)side->d_batch;
  const int64_t *positions = (const int64_t *)(side->d_batch + positions_at());
  const int64_t *slots = (const int64_t *)(side->d_batch + slots_at(rows));
  kvs_block_tables bt = {(const int32_t *)(side->d_batch + blocks_at(rows)), 2, step->s.dims.page};
  status = kvs_device_tables_ring_ctx_counted(step->s.tables, &bt, positions, rows, count,
                                              side->own, side->prev, side->ring, st, err);
  if (status != KVS_OK) goto out;
  bool per_request = step->s.placement.rings != KVS_STATE_RINGS_PER_PAGE;
  if (step->s.csa_derivable || step->s.hca_derivable) {
    status = kvs_device_tables_batch_state_locs_counted(
        step->s.tables, side->own, per_request ? slots : NULL, positions, rows, count,
        step->s.csa_derivable ? side->csa : NULL, step->s.hca_derivable ? side->hca : NULL, st,
        err);
    if (status != KVS_OK) goto out;
  }
  /* A kind the placement cannot derive reads -1 (all-ones bytes). */
  if (!step->s.csa_derivable) {
    KVS_CUDA_GOTO(cudaMemsetAsync(side->csa, 0xff, rows * sizeof(int64_t), st),
                  "cudaMemsetAsync of the ratio-4 ring locations", err, status, out);
  }
  if (!step->s.hca_derivable) {
    KVS_CUDA_GOTO(cudaMemsetAsync(side->hca, 0xff, rows * sizeof(int64_t), st),
                  "cudaMemsetAsync of the ratio-128 ring locations", err, status, out);
  }
out:
  return status;
}

/* The side's work captured once (per message buffer) as a graph. */
static kvs_status capture(cuda_step *step, step_side *side, const void *message, kvs_error *err) {
  if (side->exec != NULL) {
    (void)cudaGraphExecDestroy(side->exec);
    side->exec = NULL;
  }
  kvs_status status =
      kvs_cuda_status(cudaStreamBeginCapture(step->s.stream, cudaStreamCaptureModeThreadLocal),
                      "cudaStreamBeginCapture of the step", err);
  if (status != KVS_OK) return status;
  kvs_status work = enqueue_work(step, side, message, err);
  cudaGraph_t graph = NULL;
  cudaError_t ended = cudaStreamEndCapture(step->s.stream, &graph);
  if (work != KVS_OK) {
    if (graph != NULL) (void)cudaGraphDestroy(graph);
    return work;
  }
  status = kvs_cuda_status(ended, "cudaStreamEndCapture of the step", err);
  if (status == KVS_OK) {
    status = kvs_cuda_status(cudaGraphInstantiate(&side->exec, graph, 0),
                             "cudaGraphInstantiate of the step", err);
  }
  if (graph != NULL) (void)cudaGraphDestroy(graph);
  if (status == KVS_OK) side->exec_message = message;
  return status;
}

/* The host part: the batch (and, with a host communicator, the message)
 * into this side's pinned staging. */
static kvs_status stage(cuda_step *step, step_side *side, const kvs_table_step_args *a,
                        kvs_error *err) {
  const size_t rows = step->s.max_rows;
  if (side->h_message != NULL) {
    /* Only the same side's previous step read this staging: done long
     * since, but with no communicator stream to order it, the host waits. */
    if (side->done_recorded) {
      kvs_status status = kvs_cuda_status(cudaEventSynchronize(side->done),
                                          "cudaEventSynchronize on the step two back", err);
      if (status != KVS_OK) return status;
    }
    kvs_step_header h;
    memset(&h, 0, sizeof h);
    h.count = (uint32_t)a->n;
    h.step = a->step;
    kvs_step_message_put_header(side->h_message, &h);
    if (a->n > 0) {
      memcpy(kvs_step_message_entries(side->h_message), a->entries, a->n * sizeof *a->entries);
    }
  }
  const kvs_ring_batch *r = a->rows;
  uint64_t n = r != NULL ? r->n_req : 0;
  memcpy(side->h_batch, &n, sizeof n);
  if (n == 0) return KVS_OK;
  memcpy(side->h_batch + positions_at(), r->positions, n * sizeof(int64_t));
  int64_t *slots = (int64_t *)(side->h_batch + slots_at(rows));
  for (uint64_t i = 0; i < n; i++) slots[i] = r->slots != NULL ? r->slots[i] : -1;
  memcpy(side->h_batch + blocks_at(rows), r->block_table, 2 * n * sizeof(int32_t));
  return KVS_OK;
}

/* Orders the side's work after what it must follow, on the device. */
static kvs_status order_before(cuda_step *step, step_side *side, kvs_error *err) {
  cudaStream_t comm = (cudaStream_t)step->s.options.comm_stream;
  kvs_status status = KVS_OK;
  if (comm != NULL) {
    KVS_CUDA_GOTO(cudaEventRecord(side->ready, comm), "cudaEventRecord after the broadcast", err,
                  status, out);
#ifndef KVS_MUTANT_STEP_NO_BROADCAST_WAIT /* defined: planted bug (tests/mutants), no wait */
    KVS_CUDA_GOTO(cudaStreamWaitEvent(step->s.stream, side->ready, 0),
                  "cudaStreamWaitEvent on the broadcast", err, status, out);
#endif
  }
  if (side->engine_read_recorded) {
    KVS_CUDA_GOTO(cudaStreamWaitEvent(step->s.stream, side->engine_read, 0),
                  "cudaStreamWaitEvent on the engine's reads", err, status, out);
  }
out:
  return status;
}

/* The side's results into the engine's buffers, after the engine's reads
 * of the step before: not in the graph (the wait is on an event the
 * engine's stream records), five copies of the step's rows. */
static kvs_status copy_into(cuda_step *step, const step_side *side, size_t n, kvs_error *err) {
  cudaStream_t st = step->s.stream;
  cudaStream_t engine = (cudaStream_t)step->s.options.engine_stream;
  kvs_status status = KVS_OK;
  if (!step->explicit_release && engine != NULL) {
    KVS_CUDA_GOTO(cudaEventRecord(step->into_read, engine),
                  "cudaEventRecord of the engine's reads of its result buffers", err, status, out);
    step->into_read_recorded = true;
  }
  if (step->into_read_recorded) {
    KVS_CUDA_GOTO(cudaStreamWaitEvent(st, step->into_read, 0),
                  "cudaStreamWaitEvent on the engine's reads of its result buffers", err, status,
                  out);
  }
  if (n == 0) goto out;
  const size_t word = sizeof(int64_t), page = (size_t)step->s.dims.page;
  const kvs_table_results *d = &step->into;
  const void *src[5] = {side->own, side->prev, side->ring, side->csa, side->hca};
  void *dst[5] = {d->own, d->prev, d->ring, d->csa_loc, d->hca_loc};
  for (int i = 0; i < 5; i++) {
    KVS_CUDA_GOTO(cudaMemcpyAsync(dst[i], src[i], (i == 2 ? n * page : n) * word,
                                  cudaMemcpyDeviceToDevice, st),
                  "cudaMemcpyAsync of the results into the engine's buffers", err, status, out);
  }
out:
  return status;
}

/* Orders what must follow the side's work after it, on the device. */
static kvs_status order_after(cuda_step *step, int q, kvs_error *err) {
  step_side *side = &step->side[q], *other = &step->side[1 - q];
  cudaStream_t comm = (cudaStream_t)step->s.options.comm_stream;
  cudaStream_t engine = (cudaStream_t)step->s.options.engine_stream;
  kvs_status status = KVS_OK;
  KVS_CUDA_GOTO(cudaEventRecord(side->done, step->s.stream), "cudaEventRecord after the step", err,
                status, out);
  side->done_recorded = true;
  /* The next broadcast rewrites the other side's message. */
  if (comm != NULL && other->done_recorded) {
    KVS_CUDA_GOTO(cudaStreamWaitEvent(comm, other->done, 0),
                  "cudaStreamWaitEvent of the communicator on the step before", err, status, out);
  }
  if (engine != NULL) {
    KVS_CUDA_GOTO(cudaStreamWaitEvent(engine, side->done, 0),
                  "cudaStreamWaitEvent of the engine's stream on the step", err, status, out);
    /* What the engine queued so far read the other side's results (with
     * explicit releases the engine says so itself; with its own result
     * buffers it reads only those). */
    if (!step->explicit_release && !step->has_into) {
      KVS_CUDA_GOTO(cudaEventRecord(other->engine_read, engine),
                    "cudaEventRecord of the engine's reads", err, status, out);
      other->engine_read_recorded = true;
    }
  }
out:
  return status;
}

kvs_status kvs_cuda_step_run(cuda_step *step, const kvs_table_step_args *a, kvs_ring_result *out,
                             void **event, kvs_table_step_timing *timing, kvs_error *err) {
  const int q = (int)(a->step & 1);
  step_side *side = &step->side[q];
  if (a->n > step->s.options.step_capacity ||
      (a->rows != NULL && a->rows->n_req > step->s.max_rows)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "step %llu has %zu entries and %zu rows; the table holds %zu and %zu",
                         (unsigned long long)a->step, a->n, a->rows != NULL ? a->rows->n_req : 0,
                         step->s.options.step_capacity, step->s.max_rows);
  }
  if ((a->device_message == NULL) != (side->d_message != NULL)) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                         "step %llu's message is %s the device, but the table was set up for a "
                         "%s communicator",
                         (unsigned long long)a->step, a->device_message != NULL ? "on" : "off",
                         side->d_message != NULL ? "host" : "device");
  }
  const void *message = a->device_message != NULL ? a->device_message : side->d_message;
  uint64_t start = kvs_now_ns();
  kvs_cuda_device_scope scope;
  kvs_status status = kvs_cuda_device_enter(step->s.device, &scope, err);
  if (status != KVS_OK) return status;
  if ((status = stage(step, side, a, err)) == KVS_OK &&
      (status = order_before(step, side, err)) == KVS_OK) {
    if (step->s.options.graphs) {
      if (side->exec == NULL || side->exec_message != message) {
        status = capture(step, side, message, err);
      }
      if (status == KVS_OK) {
        status = kvs_cuda_status(cudaGraphLaunch(side->exec, step->s.stream),
                                 "cudaGraphLaunch of the step", err);
      }
    } else {
      status = enqueue_work(step, side, message, err);
    }
  }
  size_t n = a->rows != NULL ? a->rows->n_req : 0;
  if (status == KVS_OK && step->has_into) status = copy_into(step, side, n, err);
  if (status == KVS_OK) status = order_after(step, q, err);
#ifdef KVS_MUTANT_STEP_HOST_SYNC /* planted bug, test builds only (tests/mutants): a host sync */
  if (status == KVS_OK) status = kvs_cuda_status(cudaStreamSynchronize(step->s.stream), "", err);
#endif
  kvs_cuda_device_leave(&scope);
  /* One queued unit: its whole time counts as the apply's. */
  timing->apply_ns = kvs_now_ns() - start;
  timing->ring_ns = 0;
  if (status != KVS_OK) return status;
  kvs_ring_result r = {side->own,         side->prev, side->ring, n,
                       step->s.dims.page, true,       side->csa,  side->hca};
  if (step->has_into) {
    const kvs_table_results *d = &step->into;
    kvs_ring_result mine = {d->own, d->prev,    d->ring,   n, step->s.dims.page,
                            true,   d->csa_loc, d->hca_loc};
    r = mine;
  }
  *out = r;
  *event = (void *)side->done;
  return KVS_OK;
}

kvs_status kvs_cuda_step_digest(cuda_step *step, uint64_t *out, kvs_error *err) {
  kvs_cuda_device_scope scope;
  kvs_status status = kvs_cuda_device_enter(step->s.device, &scope, err);
  if (status != KVS_OK) return status;
  status = kvs_device_tables_digest(step->s.tables, step->d_digest, step->s.stream, err);
  if (status == KVS_OK) {
    status = kvs_cuda_status(cudaMemcpyAsync(step->h_digest, step->d_digest, sizeof *step->h_digest,
                                             cudaMemcpyDeviceToHost, step->s.stream),
                             "cudaMemcpyAsync of the digest word", err);
  }
  if (status == KVS_OK) {
    status = kvs_cuda_status(cudaEventRecord(step->digest_done, step->s.stream),
                             "cudaEventRecord after the digest", err);
  }
  if (status == KVS_OK) {
    status = kvs_cuda_status(cudaEventSynchronize(step->digest_done),
                             "cudaEventSynchronize for the digest", err);
  }
  kvs_cuda_device_leave(&scope);
  if (status == KVS_OK) *out = (uint64_t)*step->h_digest;
  return status;
}

kvs_status kvs_cuda_step_set_results(cuda_step *step, const kvs_table_results *into,
                                     bool explicit_release, kvs_error *err) {
  (void)err;
  step->has_into = into != NULL;
  if (into != NULL) step->into = *into;
  step->explicit_release = explicit_release;
  return KVS_OK;
}

kvs_status kvs_cuda_step_release(cuda_step *step, uint64_t step_number, cudaStream_t stream,
                                 kvs_error *err) {
  kvs_status status = kvs_cuda_stream_not_capturing(stream, "the stream of the release", err);
  if (status != KVS_OK) return status;
  kvs_cuda_device_scope scope;
  if ((status = kvs_cuda_device_enter(step->s.device, &scope, err)) != KVS_OK) return status;
  step_side *side = &step->side[step_number & 1];
  cudaEvent_t event = step->has_into ? step->into_read : side->engine_read;
  status = kvs_cuda_status(cudaEventRecord(event, stream), "cudaEventRecord of the release", err);
  if (status == KVS_OK) {
    if (step->has_into) {
      step->into_read_recorded = true;
    } else {
      side->engine_read_recorded = true;
    }
  }
  kvs_cuda_device_leave(&scope);
  return status;
}

kvs_status kvs_cuda_stream_not_capturing(cudaStream_t stream, const char *what, kvs_error *err) {
  if (stream == NULL) return KVS_OK;
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  kvs_status status =
      kvs_cuda_status(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing", err);
  if (status != KVS_OK || capture == cudaStreamCaptureStatusNone) return status;
  return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT,
                       "%s is capturing a CUDA graph: kvshard's step and releases run outside "
                       "capture (capture only the forward that reads the node's result "
                       "buffers, then call kvs_node_step and kvs_node_release between replays)",
                       what);
}
