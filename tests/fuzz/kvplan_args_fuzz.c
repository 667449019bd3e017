/* Fuzzes kvplan's argument parsing. The first input byte picks the
 * subcommand (`solve` or `plan`, bit 0) and the form of the rest (bit 1):
 * raw, split at NUL bytes into its argv; or structured, each byte pair a
 * known flag and a value of the shape that flag takes (a byte with its top
 * bit set takes a raw piece of the input instead), so that most argvs get
 * past the parser into the planner. Any argv exits 0, 1 or 2 with no crash, leak or undefined
 * behaviour. Flags that would write files (--svg) or read a file the
 * fuzzer names as a topology (a FIFO would block) are replaced by --json
 * before the call; getopt's prefix matching is accounted for. An input
 * counts as past parsing when the parser accepted its argv (exit 0 or 1:
 * the planner ran on it). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "tests/fuzz/fuzz_stats.h"
#include "kvplan/kvplan.h"

KVS_FUZZ_TARGET("kvplan_args_fuzz", "argv the parser accepted (exit 0 or 1): the planner ran");

/* Whether arg (up to any '=') is an abbreviation getopt would take for
 * `flag`, at least `min_len` characters long. */
static int abbreviates(const char *arg, const char *flag, size_t min_len) {
  size_t len = strcspn(arg, "=");
  return len >= min_len && len <= strlen(flag) && strncmp(arg, flag, len) == 0;
}

enum value_kind { NONE, COUNT, BYTES, BYTES_LIST, RATIOS, FRACTION, MODEL };

static const struct {
  const char *flag;
  enum value_kind kind;
} flags[] = {
    {"--budget", BYTES},
    {"--budget-per-gpu", BYTES_LIST},
    {"--floor-pages", COUNT},
    {"--head-dim", COUNT},
    {"--index-head-dim", COUNT},
    {"--layers", COUNT},
    {"--ratios", RATIOS},
    {"--json", NONE},
    {"--max-running", COUNT},
    {"--max-seq-len", COUNT},
    {"--memory-ratio", FRACTION},
    {"--model", MODEL},
    {"--no-radix", NONE},
    {"--radix", NONE},
    {"--page", COUNT},
    {"--pp", COUNT},
    {"--tp", COUNT},
    {"--reserve", BYTES},
    {"--scratch", COUNT},
    {"--swa-ratio", FRACTION},
    /* Data-parallel attention, expert parallelism and the weights by kind
     * (plan only; solve refuses them as unknown). */
    {"--dp", COUNT},
    {"--ep", COUNT},
    {"--gpu-memory", BYTES},
    {"--expert-weights", BYTES},
    {"--shared-weights", BYTES},
};

/* Per kind, 8 values a real invocation would give, then 4 it must refuse. */
static const char *const values[][12] = {
    [NONE] = {NULL},
    [COUNT] = {"1", "2", "4", "8", "21", "128", "1024", "64", "0", "-1", "18446744073709551615",
               "3x"},
    [BYTES] = {"80GiB", "141GB", "1TiB", "100MiB", "900000", "40GiB", "1GiB", "70GB", "0",
               "18446744073709551615", "-5GB", "1.5GiB"},
    [BYTES_LIST] = {"80GiB,80GiB,80GiB,80GiB,80GiB,80GiB,80GiB,80GiB", "80GiB,70GiB",
                    "80GiB,80GiB,80GiB,80GiB", "141GB,141GB,141GB,141GB,141GB,141GB,141GB,141GB",
                    "80GiB", "1TiB,1TiB", "40GiB,80GiB", "80GiB,80GiB", "", ",", "80GiB,,80GiB",
                    "x"},
    [RATIOS] = {"0,4,128,4", "0,4", "4", "0,0,4,128", "128,128,128,128", "0,4,128,4,0,4,128,4",
                "4,4,4,4", "0,4,128", "3", "", "0,,4", "0,4,128,-4"},
    [FRACTION] = {"0.125", "0.9", "0.5", "1", "0.04", "0.25", "0.01", "0.75", "1.5", "nan", "-0.1",
                  "0.125x"},
    [MODEL] = {"dsv4-flash", "dsv4-pro", "dsv4-flash", "dsv4-pro", "dsv4-flash", "dsv4-pro",
               "dsv4-flash", "dsv4-pro", "nosuch", "", "DSV4-FLASH", "/"},
};

/* Builds a structured argv into argv[1..] from byte pairs: a flag, then
 * its value by the second byte's top nibble: mostly a good value, one in
 * eight a value to refuse, one in sixteen a raw piece of the input's text
 * (cut from text, which the caller frees). */
static int structured(const uint8_t *data, size_t size, char *text, char **argv, int cap) {
  int argc = 1;
  size_t raw_at = 0;
  for (size_t at = 0; at + 1 < size && argc + 2 < cap; at += 2) {
    size_t f = data[at] % (sizeof flags / sizeof flags[0]);
    argv[argc++] = (char *)flags[f].flag;
    if (flags[f].kind == NONE) continue;
    uint8_t v = data[at + 1];
    if ((v & 0xf0) == 0xf0) {
      if (raw_at > size) raw_at = 0;
      argv[argc++] = text + raw_at;
      raw_at += strlen(text + raw_at) + 1;
    } else if ((v & 0xe0) == 0xe0) {
      argv[argc++] = (char *)values[flags[f].kind][8 + v % 4];
    } else {
      argv[argc++] = (char *)values[flags[f].kind][v % 8];
    }
  }
  return argc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  KVS_FUZZ_RUN();
  static int ready;
  if (!ready) {
    /* The tool prints tables; stderr stays for libFuzzer. */
    if (freopen("/dev/null", "w", stdout) == NULL) __builtin_trap();
    /* One topology never destroyed keeps hwloc's plugins loaded: live
     * discovery leaves libpciaccess state behind in the pci plugin, which
     * LeakSanitizer would otherwise report once the plugin is unloaded
     * (see tests/topology/hwloc_pin.cc). */
    static hwloc_topology_t pinned;
    hwloc_topology_init(&pinned);
    ready = 1;
  }
  if (size == 0) return 0;
  int plan = data[0] & 1, form = data[0] & 2;
  data++, size--;
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = '\0';
  char *argv[34];
  int argc = 1;
  argv[0] = plan ? "plan" : "solve";
  if (form) {
    argc = structured(data, size, text, argv, 33);
  } else {
    for (size_t at = 0; at <= size && argc < 32;) {
      char *arg = text + at;
      at += strlen(arg) + 1;
      argv[argc++] = arg;
    }
  }
  for (int i = 1; i < argc; i++) {
    if (abbreviates(argv[i], "--svg", 4) || abbreviates(argv[i], "--topology", 4)) {
      argv[i] = "--json";
    }
  }
  argv[argc] = NULL;
  int status = plan ? kvs_kvplan_plan(argc, argv) : kvs_kvplan_solve(argc, argv);
  free(text);
  if (status < 0 || status > 2) __builtin_trap();
  if (status != 2) KVS_FUZZ_PAST();
  return 0;
}
