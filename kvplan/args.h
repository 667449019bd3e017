/* Flag-value parsing shared by the command-line tools. Each parser
 * accepts the whole string or nothing, and names the flag in its error. */
#ifndef KVS_KVPLAN_ARGS_H
#define KVS_KVPLAN_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A decimal unsigned integer. */
kvs_status kvs_parse_u64(const char *flag, const char *text, uint64_t *out, kvs_error *err);

/* The largest byte count a flag may give: 2^62 bytes (4 EiB). */
#define KVS_MAX_BYTE_COUNT (UINT64_C(1) << 62)

/* A byte count: a number with an optional binary suffix (KiB, MiB, GiB,
 * TiB) or decimal one (KB, MB, GB, TB), e.g. "80GiB", "141GB", "1024", at
 * most KVS_MAX_BYTE_COUNT. With a unit the number may carry decimals, as
 * the tools print sizes ("17.35GiB"), rounded to the nearest byte; without
 * one (or with "B") it is whole bytes. */
kvs_status kvs_parse_bytes(const char *flag, const char *text, uint64_t *out, kvs_error *err);

/* A bare number below this, and above 0, is refused by every size flag
 * (kvplan/deploy_flags.h): "--budget 80" is far likelier 80 GiB than 80
 * bytes. */
#define KVS_MIN_UNITLESS_MEMORY (UINT64_C(1) << 20)

/* A token count: an integer, or one with K (x 1024) or M (x 1048576):
 * "1048576", "1M", "128K". Nothing else (no decimals, spaces or signs). */
kvs_status kvs_parse_tokens(const char *flag, const char *text, uint64_t *out, kvs_error *err);

/* A finite number written plainly: an optional '-', decimal digits with
 * at most one '.', an optional exponent ("0.9", "-1", "1e-3"); no spaces,
 * '+', hex, inf or nan. */
kvs_status kvs_parse_double(const char *flag, const char *text, double *out, kvs_error *err);

/* kvs_parse_u64 and kvs_parse_double held to [lo, hi], for tools that word
 * the refusal by what the flag takes: anything else is KVS_ERR_PARSE
 * "<flag> needs <want>, got '<text>'" (want e.g. "a rank count in [1, 65535]";
 * text NULL reads as ''). *out is written only on success. */
kvs_status kvs_parse_u64_in(const char *flag, const char *text, uint64_t lo, uint64_t hi,
                            const char *want, uint64_t *out, kvs_error *err);
kvs_status kvs_parse_double_in(const char *flag, const char *text, double lo, double hi,
                               const char *want, double *out, kvs_error *err);

/* The one rule for every tool: a flag given twice is refused, never the
 * last one silently taken. Start from an all-zero kvs_flags_seen and pass
 * each flag as it comes; kvs_flag_once refuses one seen before as
 * KVS_ERR_PARSE "<flag> is given twice; give it once". Flags past
 * KVS_FLAGS_SEEN_MAX distinct ones are not recorded (no tool has that
 * many). */
#define KVS_FLAGS_SEEN_MAX 64
typedef struct kvs_flags_seen {
  const char *flags[KVS_FLAGS_SEEN_MAX];
  size_t n;
} kvs_flags_seen;
kvs_status kvs_flag_once(kvs_flags_seen *seen, const char *flag, kvs_error *err);

/* A comma-separated list: each item (at most 63 characters) read by
 * one(flag, item, index, ctx, err), at most cap of them; *n_out the count.
 * An empty list, an empty or overlong item and more than cap items are
 * refused naming the flag. */
typedef kvs_status (*kvs_list_item_fn)(const char *flag, const char *item, size_t index, void *ctx,
                                       kvs_error *err);
kvs_status kvs_parse_list(const char *flag, const char *text, size_t cap, size_t *n_out,
                          kvs_error *err, kvs_list_item_fn one, void *ctx);
/* A comma-separated list of 32-bit integers into out[0..cap). */
kvs_status kvs_parse_u32_list(const char *flag, const char *text, uint32_t *out, size_t cap,
                              size_t *n_out, kvs_error *err);

/* Every tool's last call: a write to stdout that failed (a full disk, a
 * closed pipe) is lost without a word unless the stream is checked once
 * everything is out. Flushes and closes stdout; on a failure says so on
 * stderr, naming the tool, and returns failed_rc when rc was 0 (a failure
 * already reported keeps its own status). Returns rc otherwise. */
int kvs_finish_stdout(const char *tool, int rc, int failed_rc);
/* For a tool that works on after its report (a node's teardown writes
 * files, which sets errno): flushes stdout now and keeps the reason of a
 * failed write for kvs_finish_stdout to name. */
void kvs_flush_stdout(void);

/* The flag of names[0..n) a mistyped one most likely meant: leading dashes
 * and any "=value" are ignored on both sides; the name fewest
 * single-character edits away (insert, delete, replace, or swap two
 * neighbours), if within a third of its length (at least 1), else one that
 * `given` is the start of (an abbreviation, which no tool accepts). NULL
 * when none is near. */
const char *kvs_nearest_flag(const char *given, const char *const *names, size_t n);

/* Says on stderr, as one line: "<tool>: unknown flag '<given>'; did you
 * mean --<nearest>? (<help> lists every flag)", without the question when
 * nothing is near. help is the command that prints the flags, e.g.
 * "kvplan plan --help". */
void kvs_report_unknown_flag(const char *tool, const char *given, const char *const *names,
                             size_t n, const char *help);

/* A tool's first call: whether its standard output is open. A closed one
 * (`tool >&-`) loses every line, and the next file the tool opens would
 * take its descriptor and receive them. Returns 0 when open, else says so
 * on stderr and returns failed_rc (the tool's "output cannot be written"
 * status). */
int kvs_require_stdout(const char *tool, int failed_rc);

/* Renders a byte count for people: "80.00 GiB". buf holds at least 32. */
const char *kvs_format_bytes(uint64_t bytes, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* KVS_KVPLAN_ARGS_H */
