#include "kvplan/tool_io.h"

static _Thread_local FILE *t_out;
static _Thread_local FILE *t_err;

FILE *kvs_tool_out(void) { return t_out != NULL ? t_out : stdout; }
FILE *kvs_tool_err(void) { return t_err != NULL ? t_err : stderr; }

void kvs_tool_streams_set(FILE *out, FILE *err) {
  t_out = out;
  t_err = err;
}
