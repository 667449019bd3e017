/* XXH3 at the machine's speed: Debian's libxxhash also exports
 * runtime-dispatched x86 entry points (AVX2, AVX-512), and
 * <xxh_x86dispatch.h> maps XXH3_64bits, XXH3_64bits_withSeed and
 * XXH3_64bits_update onto them: the same values, 35 GB/s a core here
 * against the baseline SSE2 build's 13 to 17. Elsewhere (no such header,
 * another architecture) the plain entry points. Include it instead of
 * <xxhash.h> where bulk rows are hashed. */
#ifndef KVS_CORE_XXH3_H
#define KVS_CORE_XXH3_H

#include <xxhash.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif
#endif

#endif /* KVS_CORE_XXH3_H */
