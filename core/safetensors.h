/* The header of a .safetensors file: every tensor's name and bytes, read
 * without touching tensor data.
 *
 * The format: an unsigned 64-bit little-endian length N, then N bytes of
 * JSON, an object mapping each tensor name to {"dtype", "shape",
 * "data_offsets": [begin, end]} (offsets into the data that follows the
 * header) plus an optional "__metadata__" object of strings. Only the
 * first 8 + N bytes are read. A header is refused, naming the file and the
 * field, when it claims more bytes than the file holds or more than
 * KVS_SAFETENSORS_MAX_HEADER, is not a JSON object, or gives a tensor
 * without a known dtype, a shape of non-negative integers, or offsets with
 * begin <= end inside the data whose span is shape x dtype bytes.
 *
 * The dtypes known are the format's: BOOL, U8, I8, I16, U16, I32, U32, I64,
 * U64, F16, BF16, F32, F64, C64, F8_E5M2, F8_E4M3, F8_E8M0 and the sub-byte
 * F4 (4 bits) and F6_E2M3, F6_E3M2 (6 bits), sized exactly: elements x bits
 * must be whole bytes. Offsets and dimensions are u64 in the format but
 * held as int64 by the JSON parser: a value past INT64_MAX is refused as
 * not valid JSON (no real file can hold such an offset). The tensors must
 * tile the data exactly, as the format's loaders require: in offset order
 * each begins where the one before ends (the first at 0) and the last ends
 * with the file, so a header that covers part of the data (or none of it),
 * leaves a gap, or puts two tensors on the same bytes (three at one
 * data_offsets, say) is refused naming the tensors and the bytes; empty
 * tensors may share an offset. Refusals: KVS_ERR_IO (open, read, not a
 * regular file), KVS_ERR_PARSE (content), KVS_ERR_NO_MEMORY. */
#ifndef KVS_CORE_SAFETENSORS_H
#define KVS_CORE_SAFETENSORS_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest header read (the format's own limit is 100 MB). */
#define KVS_SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u)

/* Called once per tensor (not for "__metadata__"), in header order, and
 * only once the whole header has checked out; a status other than KVS_OK
 * stops the walk and is returned as it is (with err as fn set it). */
typedef kvs_status (*kvs_tensor_fn)(void *ctx, const char *name, uint64_t bytes, kvs_error *err);

/* Reads path's header and calls fn for each tensor (fn may be NULL to only
 * check it). *n_tensors (may be NULL) is written, with the count, only on
 * success. Symbolic links are followed. Only a
 * regular file is opened (a FIFO or a directory is refused by its kind,
 * without waiting on it). path NULL is KVS_ERR_INVALID_ARGUMENT. */
kvs_status kvs_safetensors_read_header(const char *path, kvs_tensor_fn fn, void *ctx,
                                       uint64_t *n_tensors, kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif /* KVS_CORE_SAFETENSORS_H */
