/* kvplan in process (kvshard.h: kvs_plan_run): the program's own code,
 * writing into memory streams instead of the process's stdout and
 * stderr, so a Python or C caller gets exactly what `kvplan ... --json`
 * prints, refusals in the same words. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "kvshard.h"
#include "kvplan/kvplan.h"
#include "kvplan/tool_io.h"

/* kvplan's parser is getopt (process-wide state) and its fit report sorts
 * with a file-scope context: one run at a time. */
#ifndef KVS_MUTANT_PLAN_RUN_UNLOCKED
static pthread_mutex_t g_run = PTHREAD_MUTEX_INITIALIZER;
#else /* planted bug (tests/mutants): each thread locks a mutex of its own */
static _Thread_local pthread_mutex_t g_run = PTHREAD_MUTEX_INITIALIZER;
#endif

void kvs_free(void *p) { free(p); }

/* The last non-empty line of text, without its newline. */
static void last_line(const char *text, char *out, size_t cap) {
  size_t end = strlen(text);
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) end--;
  size_t start = end;
  while (start > 0 && text[start - 1] != '\n') start--;
  size_t len = end - start < cap - 1 ? end - start : cap - 1;
  memcpy(out, text + start, len);
  out[len] = '\0';
}

/* Whether kvplan printed an answer: anything but white space. */
static bool has_answer(const char *text) {
  for (; *text != '\0'; text++) {
    if (*text != ' ' && *text != '\n' && *text != '\t' && *text != '\r') return true;
  }
  return false;
}

static kvs_status run_locked(int argc, char **argv, char **out_text, char **err_text, int *rc,
                             kvs_status *last, kvs_error *err) {
  size_t out_len = 0, err_len = 0;
  FILE *out = open_memstream(out_text, &out_len);
  FILE *errs = out != NULL ? open_memstream(err_text, &err_len) : NULL;
  if (out == NULL || errs == NULL) {
    if (out != NULL) fclose(out), free(*out_text), *out_text = NULL;
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "kvs_plan_run: no memory for kvplan's output");
  }
  kvs_tool_streams_set(out, errs);
  kvs_error_last_failure_reset();
  *rc = kvs_kvplan_run(argc, argv);
  *last = kvs_error_last_failure();
  kvs_tool_streams_set(NULL, NULL);
  bool failed = fclose(out) != 0;
  failed |= fclose(errs) != 0;
  if (failed || *out_text == NULL || *err_text == NULL) {
    free(*out_text), free(*err_text);
    *out_text = *err_text = NULL;
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "kvs_plan_run: kvplan's output did not fit");
  }
  return KVS_OK;
}

kvs_status kvs_plan_run(const char *const *args, size_t n, char **out, char **notes,
                        kvs_error *err) {
  if (args == NULL || out == NULL || n == 0) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_plan_run: %s",
                         out == NULL    ? "out is NULL"
                         : args == NULL ? "args is NULL"
                                        : "no subcommand: args[0] is plan, fit, solve or transfer");
  }
  if (n > 4096) {
    return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_plan_run: %zu arguments", n);
  }
  /* argv as the program gets it: "kvplan", then the caller's words,
   * copied (the parser permutes them). */
  char **argv = calloc(n + 2, sizeof *argv);
  if (argv == NULL) return kvs_error_set(err, KVS_ERR_NO_MEMORY, "kvs_plan_run: no memory");
  argv[0] = strdup("kvplan");
  bool ok = argv[0] != NULL;
  for (size_t i = 0; i < n && ok; i++) {
    if (args[i] == NULL) {
      for (size_t k = 0; k <= i; k++) free(argv[k]);
      free(argv);
      return kvs_error_set(err, KVS_ERR_INVALID_ARGUMENT, "kvs_plan_run: args[%zu] is NULL", i);
    }
    ok = (argv[i + 1] = strdup(args[i])) != NULL;
  }
  char *out_text = NULL, *err_text = NULL;
  int rc = 0;
  kvs_status last = KVS_OK;
  kvs_status status =
      ok ? KVS_OK : kvs_error_set(err, KVS_ERR_NO_MEMORY, "kvs_plan_run: no memory");
  if (status == KVS_OK) {
    pthread_mutex_lock(&g_run);
    status = run_locked((int)n + 1, argv, &out_text, &err_text, &rc, &last, err);
    pthread_mutex_unlock(&g_run);
  }
  for (size_t i = 0; i <= n; i++) free(argv[i]);
  free(argv);
  if (status != KVS_OK) return status;

  /* An answer: exit 0, or fit's exit 1 with its answer printed (no layout
   * fits, which its JSON says). */
  bool answer = rc == 0 || (rc == 1 && strcmp(args[0], "fit") == 0 && has_answer(out_text));
  char line[KVS_ERROR_MESSAGE_MAX];
  last_line(has_answer(err_text) ? err_text : out_text, line, sizeof line);
  *out = out_text;
  if (notes != NULL) {
    *notes = err_text;
  } else {
    free(err_text);
  }
  if (answer) return KVS_OK;
  /* Bad usage is a parse refusal; a plan that cannot be made is the
   * failure the run last met (a budget too small, a file that does not
   * read, ...). */
  kvs_status why = rc == 2 ? KVS_ERR_PARSE : last != KVS_OK ? last : KVS_ERR_UNSUPPORTED;
  return kvs_error_set(err, why, "%s", line);
}
