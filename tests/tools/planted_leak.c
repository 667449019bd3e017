/* A program that leaks on purpose, so that a test can show LeakSanitizer
 * still finds a leak under the options the suite runs with (.bazelrc's
 * asan config). Threads run and end first, as in kvsim's ranks, so the
 * leak check runs in a process that had several threads with thread-local
 * storage. Prints "planted" and exits 0; under AddressSanitizer the leak
 * check at exit then reports the block and fails the process. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char scratch[256];

static void *touch_tls(void *arg) {
  memset(scratch, (int)(size_t)arg, sizeof scratch);
  return NULL;
}

/* The lost block: its only pointer dies with this frame. */
__attribute__((noinline)) static void planted_leak_allocation(void) {
  char *volatile block = malloc(4096);
  if (block != NULL) memset(block, 0x5a, 4096);
}

/* Overwrites the stack the leaking frame used, so no stale copy of the
 * pointer there keeps the block reachable. */
__attribute__((noinline)) static void scrub_stack(void) {
  volatile char area[16384];
  memset((char *)area, 0, sizeof area);
}

int main(void) {
  pthread_t threads[4];
  for (size_t i = 0; i < 4; i++) {
    if (pthread_create(&threads[i], NULL, touch_tls, (void *)(i + 1)) != 0) return 2;
  }
  for (size_t i = 0; i < 4; i++) pthread_join(threads[i], NULL);
  planted_leak_allocation();
  scrub_stack();
  puts("planted");
  fflush(stdout); /* the leak check ends the process before exit flushes */
  return 0;
}
