/* Fuzzes kvplan's argument parsing. The first input byte picks the
 * subcommand (`solve` or `plan`); the rest is split at NUL bytes into its
 * argv. Any argv exits 0, 1 or 2 with no crash, leak or undefined
 * behaviour. Flags that would write files (--svg) or read a file the
 * fuzzer names as a topology (a FIFO would block) are replaced by --json
 * before the call; getopt's prefix matching is accounted for. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "tools/kvplan.h"

/* Whether arg (up to any '=') is an abbreviation getopt would take for
 * `flag`, at least `min_len` characters long. */
static int abbreviates(const char *arg, const char *flag, size_t min_len) {
  size_t len = strcspn(arg, "=");
  return len >= min_len && len <= strlen(flag) && strncmp(arg, flag, len) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
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
  int plan = data[0] & 1;
  data++, size--;
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = '\0';
  char *argv[34];
  int argc = 0;
  argv[argc++] = plan ? "plan" : "solve";
  for (size_t at = 0; at <= size && argc < 32;) {
    char *arg = text + at;
    at += strlen(arg) + 1;
    if (abbreviates(arg, "--svg", 4) || abbreviates(arg, "--topology", 4)) arg = "--json";
    argv[argc++] = arg;
  }
  argv[argc] = NULL;
  int status = plan ? kvs_kvplan_plan(argc, argv) : kvs_kvplan_solve(argc, argv);
  free(text);
  if (status < 0 || status > 2) __builtin_trap();
  return 0;
}
