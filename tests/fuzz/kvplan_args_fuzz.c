/* Fuzzes kvplan's argument parsing: the input is split at NUL bytes into
 * an argv for `kvplan solve`. Any argv exits 0, 1 or 2 with no crash,
 * leak or undefined behaviour. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/kvplan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int quiet;
  if (!quiet) { /* the tool prints tables; stderr stays for libFuzzer */
    if (freopen("/dev/null", "w", stdout) == NULL) __builtin_trap();
    quiet = 1;
  }
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = '\0';
  char *argv[33];
  int argc = 0;
  argv[argc++] = "solve";
  for (size_t at = 0; at <= size && argc < 32;) {
    argv[argc++] = text + at;
    at += strlen(text + at) + 1;
  }
  argv[argc] = NULL;
  int status = kvs_kvplan_solve(argc, argv);
  free(text);
  if (status < 0 || status > 2) __builtin_trap();
  return 0;
}
