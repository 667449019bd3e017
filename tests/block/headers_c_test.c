/* Every public block header compiles as plain C11 (the GoogleTest files
 * only prove they compile as C++), and the INIT macros are usable. */
#include "core/blocks/atomic_file.h"
#include "core/blocks/bf16.h"
#include "core/blocks/block_codec.h"
#include "core/blocks/block_hash.h"
#include "core/blocks/block_layout.h"
#include "core/blocks/block_signature.h"
#include "core/blocks/block_signed.h"
#include "core/blocks/block_store.h"
#include "tools/bench_block.h"

#include <stdio.h>

int main(void) {
  kvs_block_store_options options = KVS_BLOCK_STORE_OPTIONS_INIT;
  kvs_block_layout layout;
  if (options.size != sizeof options || !options.verify_on_open) return 1;
  if (kvs_block_layout_init(64, 128, &layout, NULL) != KVS_OK) return 1;
  if (!kvs_block_format_readable(KVS_BLOCK_FORMAT_VERSION)) return 1;
  if (kvs_bf16_from_float(1.0f) != 0x3f80) return 1;
  puts("block headers compile as C");
  return 0;
}
