#include "kvplan/args.h"
#include "kvplan/tool_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

kvs_status kvs_parse_u64(const char *flag, const char *text, uint64_t *out, kvs_error *err) {
  if (text == NULL || *text < '0' || *text > '9') {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s needs a non-negative integer, got '%s'", flag,
                         text == NULL ? "" : text);
  }
  errno = 0;
  char *end = NULL;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s needs a non-negative integer, got '%s'", flag,
                         text);
  }
  *out = value;
  return KVS_OK;
}

/* A byte count's unit: its suffix and the bytes one of it stands for. */
typedef struct byte_unit {
  const char *suffix;
  uint64_t scale;
} byte_unit;

static const byte_unit kUnits[] = {
    {"", 1},
    {"B", 1},
    {"KiB", 1ull << 10},
    {"MiB", 1ull << 20},
    {"GiB", 1ull << 30},
    {"TiB", 1ull << 40},
    {"KB", 1000ull},
    {"MB", 1000ull * 1000},
    {"GB", 1000ull * 1000 * 1000},
    {"TB", 1000ull * 1000 * 1000 * 1000},
};

static const byte_unit *unit_of(const char *suffix) {
  for (size_t i = 0; i < sizeof kUnits / sizeof kUnits[0]; i++) {
    if (strcmp(suffix, kUnits[i].suffix) == 0) return &kUnits[i];
  }
  return NULL;
}

/* Decimals a size may carry ("17.35GiB"): more would say nothing a byte
 * can hold, and 18 keep the arithmetic below within 128 bits. */
#define MAX_SIZE_DECIMALS 18

/* "<digits>[.<digits>]": the whole part (at most 2^64 - 1), the fraction's
 * digits as an integer and their count; *rest is what follows. False for
 * anything else. */
static bool split_number(const char *text, uint64_t *whole, uint64_t *frac, unsigned *n_frac,
                         const char **rest) {
  const char *p = text;
  unsigned __int128 w = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    w = w * 10 + (unsigned)(*p - '0');
    if (w > UINT64_MAX) return false;
  }
  if (p == text) return false;
  *whole = (uint64_t)w;
  *frac = 0;
  *n_frac = 0;
  if (*p == '.') {
    const char *digits = ++p;
    for (; *p >= '0' && *p <= '9'; p++) {
      if (*n_frac == MAX_SIZE_DECIMALS) return false;
      *frac = *frac * 10 + (uint64_t)(*p - '0');
      (*n_frac)++;
    }
    if (p == digits) return false;
  }
  *rest = p;
  return true;
}

/* whole.frac x scale to the nearest byte, or UINT64_MAX past 2^64 - 1. */
static uint64_t scale_size(uint64_t whole, uint64_t frac, unsigned n_frac, uint64_t scale) {
  unsigned __int128 pow10 = 1;
  for (unsigned i = 0; i < n_frac; i++) pow10 *= 10;
  unsigned __int128 bytes = (unsigned __int128)whole * scale;
  bytes += ((unsigned __int128)frac * scale + pow10 / 2) / pow10;
  return bytes > UINT64_MAX ? UINT64_MAX : (uint64_t)bytes;
}

kvs_status kvs_parse_bytes(const char *flag, const char *text, uint64_t *out, kvs_error *err) {
  uint64_t whole, frac;
  unsigned n_frac;
  const char *rest = NULL;
  if (text == NULL || !split_number(text, &whole, &frac, &n_frac, &rest)) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "%s needs a byte count such as 80GiB, 17.35GiB or 85899345920, got '%s'",
                         flag, text == NULL ? "" : text);
  }
  const byte_unit *unit = unit_of(rest);
  if (unit == NULL) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "%s needs a byte count such as 80GiB or 85899345920 (suffixes KiB MiB "
                         "GiB TiB KB MB GB TB), got '%s'",
                         flag, text);
  }
  if (n_frac > 0 && unit->scale == 1) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "%s is %s: a count of bytes is whole; decimals need a unit (17.35GiB)",
                         flag, text);
  }
  uint64_t value = scale_size(whole, frac, n_frac, unit->scale);
  if (value > KVS_MAX_BYTE_COUNT) {
    return kvs_error_set(err, KVS_ERR_PARSE,
                         "%s is %s, above the %llu bytes (4 EiB) a byte count may give: no "
                         "device has that much, and sizes past 2^63 bytes cannot be written "
                         "as JSON integers",
                         flag, text, (unsigned long long)KVS_MAX_BYTE_COUNT);
  }
  *out = value;
  return KVS_OK;
}

kvs_status kvs_parse_tokens(const char *flag, const char *text, uint64_t *out, kvs_error *err) {
  static const struct {
    const char *suffix;
    uint64_t scale;
  } units[] = {{"", 1}, {"K", 1ull << 10}, {"M", 1ull << 20}};
  uint64_t whole, frac;
  unsigned n_frac;
  const char *rest = NULL;
  bool ok = text != NULL && split_number(text, &whole, &frac, &n_frac, &rest) && n_frac == 0;
  for (size_t i = 0; ok && i < sizeof units / sizeof units[0]; i++) {
    if (strcmp(rest, units[i].suffix) != 0) continue;
    if (whole > UINT64_MAX / units[i].scale) break;
    *out = whole * units[i].scale;
    return KVS_OK;
  }
  return kvs_error_set(err, KVS_ERR_PARSE,
                       "%s needs a token count such as 1048576, 1M or 128K (K = 1024, M = "
                       "1048576), got '%s'",
                       flag, text == NULL ? "" : text);
}

/* Whether text is a plain decimal number: an optional '-', digits with at
 * most one '.', then an optional exponent. strtod also takes leading
 * spaces, '+', hex ("0x1p-1"), "inf" and "nan", none of which a byte count
 * accepts: a number flag must not either. */
static bool plain_decimal(const char *text) {
  const char *p = text;
  if (*p == '-') p++;
  size_t digits = 0;
  for (; *p >= '0' && *p <= '9'; p++) digits++;
  if (*p == '.') {
    for (p++; *p >= '0' && *p <= '9'; p++) digits++;
  }
  if (digits == 0) return false;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '-' || *p == '+') p++;
    if (!(*p >= '0' && *p <= '9')) return false;
    while (*p >= '0' && *p <= '9') p++;
  }
  return *p == '\0';
}

kvs_status kvs_parse_double(const char *flag, const char *text, double *out, kvs_error *err) {
  errno = 0;
  char *end = NULL;
  bool plain = text != NULL && plain_decimal(text);
  double value = plain ? strtod(text, &end) : 0.0;
  if (!plain || errno != 0 || *end != '\0' || !isfinite(value)) {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s needs a number, got '%s'", flag,
                         text == NULL ? "" : text);
  }
  *out = value;
  return KVS_OK;
}

kvs_status kvs_parse_u64_in(const char *flag, const char *text, uint64_t lo, uint64_t hi,
                            const char *want, uint64_t *out, kvs_error *err) {
  uint64_t value;
  if (kvs_parse_u64(flag, text, &value, NULL) != KVS_OK || value < lo || value > hi) {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s needs %s, got '%s'", flag, want,
                         text == NULL ? "" : text);
  }
  *out = value;
  return KVS_OK;
}

kvs_status kvs_parse_double_in(const char *flag, const char *text, double lo, double hi,
                               const char *want, double *out, kvs_error *err) {
  double value;
  if (kvs_parse_double(flag, text, &value, NULL) != KVS_OK || !(value >= lo && value <= hi)) {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s needs %s, got '%s'", flag, want,
                         text == NULL ? "" : text);
  }
  *out = value;
  return KVS_OK;
}

kvs_status kvs_flag_once(kvs_flags_seen *seen, const char *flag, kvs_error *err) {
  for (size_t k = 0; k < seen->n; k++) {
    if (strcmp(seen->flags[k], flag) == 0) {
      return kvs_error_set(err, KVS_ERR_PARSE, "%s is given twice; give it once", flag);
    }
  }
  if (seen->n < KVS_FLAGS_SEEN_MAX) seen->flags[seen->n++] = flag;
  return KVS_OK;
}

kvs_status kvs_parse_list(const char *flag, const char *text, size_t cap, size_t *n_out,
                          kvs_error *err, kvs_list_item_fn one, void *ctx) {
  if (text == NULL || *text == '\0') {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s needs a comma-separated list", flag);
  }
  size_t n = 0;
  const char *at = text;
  char item[64];
  for (;;) {
    const char *comma = strchr(at, ',');
    size_t len = comma != NULL ? (size_t)(comma - at) : strlen(at);
    if (len == 0 || len >= sizeof item) {
      return kvs_error_set(err, KVS_ERR_PARSE, "%s has an empty or overlong item in '%s'", flag,
                           text);
    }
    if (n == cap) {
      return kvs_error_set(err, KVS_ERR_PARSE, "%s lists more than %zu items", flag, cap);
    }
    memcpy(item, at, len);
    item[len] = '\0';
    kvs_status status = one(flag, item, n, ctx, err);
    if (status != KVS_OK) return status;
    n++;
    if (comma == NULL) break;
    at = comma + 1;
  }
  *n_out = n;
  return KVS_OK;
}

static kvs_status one_u32(const char *flag, const char *item, size_t index, void *out,
                          kvs_error *err) {
  uint64_t value;
  kvs_status status = kvs_parse_u64(flag, item, &value, err);
  if (status != KVS_OK) return status;
  if (value > UINT32_MAX) {
    return kvs_error_set(err, KVS_ERR_PARSE, "%s item %s does not fit in 32 bits", flag, item);
  }
  ((uint32_t *)out)[index] = (uint32_t)value;
  return KVS_OK;
}

kvs_status kvs_parse_u32_list(const char *flag, const char *text, uint32_t *out, size_t cap,
                              size_t *n_out, kvs_error *err) {
  return kvs_parse_list(flag, text, cap, n_out, err, one_u32, out);
}

/* A flag's name without its dashes and its "=value": start, length. */
static const char *bare_name(const char *flag, size_t *len) {
  while (*flag == '-') flag++;
  *len = strcspn(flag, "=");
  return flag;
}

/* Edits from a[0..la) to b[0..lb): Levenshtein with adjacent swaps
 * (optimal string alignment). Names longer than the table are far. */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb) {
  enum { MAX_NAME = 48 };
  if (la >= MAX_NAME || lb >= MAX_NAME) return SIZE_MAX;
  size_t d[MAX_NAME + 1][MAX_NAME + 1];
  for (size_t i = 0; i <= la; i++) d[i][0] = i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = j;
  for (size_t i = 1; i <= la; i++) {
    for (size_t j = 1; j <= lb; j++) {
      size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best) {
        best = d[i - 2][j - 2] + 1;
      }
      d[i][j] = best;
    }
  }
  return d[la][lb];
}

const char *kvs_nearest_flag(const char *given, const char *const *names, size_t n) {
  size_t lg;
  const char *g = bare_name(given != NULL ? given : "", &lg);
  const char *best = NULL, *prefix_of = NULL;
  size_t best_distance = SIZE_MAX, n_prefix = 0;
  for (size_t i = 0; lg > 0 && i < n; i++) {
    size_t ln;
    const char *name = bare_name(names[i], &ln);
    size_t limit = ln / 3 > 1 ? ln / 3 : 1;
    size_t distance = edit_distance(g, lg, name, ln);
    if (distance <= limit && distance < best_distance) {
      best = names[i];
      best_distance = distance;
    }
    if (lg < ln && strncmp(g, name, lg) == 0 && n_prefix++ == 0) prefix_of = names[i];
  }
  /* The start of exactly one name is that name cut short ("--weights-t"),
   * whatever else is a few edits away. */
  if (n_prefix == 1) return prefix_of;
  return best != NULL ? best : prefix_of;
}

void kvs_report_unknown_flag(const char *tool, const char *given, const char *const *names,
                             size_t n, const char *help) {
  const char *near = kvs_nearest_flag(given, names, n);
  if (near == NULL) {
    fprintf(kvs_tool_err(), "%s: unknown flag '%s' (%s lists every flag)\n", tool, given, help);
    return;
  }
  size_t len;
  const char *name = bare_name(near, &len);
  fprintf(kvs_tool_err(), "%s: unknown flag '%s'; did you mean --%.*s? (%s lists every flag)\n",
          tool, given, (int)len, name, help);
}

const char *kvs_format_bytes(uint64_t bytes, char *buf, size_t len) {
  static const char *names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = (double)bytes;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof names / sizeof names[0]) {
    value /= 1024.0;
    unit++;
  }
  if (unit == 0) {
    snprintf(buf, len, "%llu B", (unsigned long long)bytes);
  } else {
    snprintf(buf, len, "%.2f %s", value, names[unit]);
  }
  return buf;
}

/* The reason of stdout's first failed write, kept by kvs_flush_stdout
 * (0: none kept). */
static int stdout_errno;

void kvs_flush_stdout(void) {
  if ((fflush(stdout) != 0 || ferror(stdout)) && stdout_errno == 0) stdout_errno = errno;
}

int kvs_finish_stdout(const char *tool, int rc, int failed_rc) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    /* errno still holds the failed write's reason unless a later call
     * changed it (then the reason kept at the report's flush names it);
     * "Success" would be no reason at all. */
    int why = stdout_errno != 0 ? stdout_errno : errno;
    fprintf(stderr, "%s: writing standard output: %s\n", tool,
            why != 0 ? strerror(why) : "an earlier write failed");
    fclose(stdout);
    return rc != 0 ? rc : failed_rc;
  }
  if (fclose(stdout) != 0) {
    fprintf(stderr, "%s: closing standard output: %s\n", tool, strerror(errno));
    return rc != 0 ? rc : failed_rc;
  }
  return rc;
}

int kvs_require_stdout(const char *tool, int failed_rc) {
  if (fcntl(STDOUT_FILENO, F_GETFD) != -1 || errno != EBADF) return 0;
  fprintf(stderr, "%s: standard output is closed: there is nowhere to write the results\n", tool);
  return failed_rc;
}
