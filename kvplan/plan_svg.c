#include "kvplan/plan_svg.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blocks/atomic_file.h"
#include "kvplan/args.h"

/* Geometry of the picture, in SVG user units (pixels). */
enum {
  MARGIN = 24,
  HEADER = 64,       /* title and subtitle */
  CAPTION_LINE = 14, /* a NUMA box's caption: the node line, then its CPUs */
  TOP_LABELS = 46,   /* "GPU n", "rank r", "tp t · pp s" above the bars */
  AREA = 320,        /* height of the tallest budget */
  BOTTOM_LABELS = 84,
  SLOT = 104, /* horizontal room per GPU */
  BAR = 50,
  BOX_PAD = 10,
  BOX_GAP = 18,
  LEGEND = 230,
};

/* One kind of bytes a bar stacks, bottom up. */
typedef struct segment {
  const char *name;
  const char *what;
  const char *color; /* NULL: the headroom hatch */
} segment;

static const segment SEGMENTS[] = {
    {"weights", "model weights on this GPU", "#5f6b73"},
    {"window", "sliding-window KV, every layer", "#4e79a7"},
    {"compressed", "compressed KV blocks (CSA, HCA)", "#f28e2b"},
    {"indexer", "indexer keys (CSA)", "#59a14f"},
    {"state", "compress-state rings", "#e15759"},
    {"index_state", "indexer state rings", "#b07aa1"},
    {"mapping", "full -> window mapping", "#76b7b2"},
    {"scratch", "scratch rows, sentinel", "#9c755f"},
    {"control", "tables' control area, alignment", "#bab0ac"},
    {"headroom", "KV budget the pool leaves unused", NULL},
    {"reserve", "kept back for the CUDA runtime", "#d8c27a"},
    {"free", "outside the memory share: activations, graphs", "#e9eef3"},
};
#define N_SEGMENTS (sizeof SEGMENTS / sizeof SEGMENTS[0])

/* The bytes of segment i on rank rp's GPU: its weights (the rule's and its
 * layers'), the KV tiers, the carve's control and padding, the headroom,
 * and from the rule's terms the reserve and what its share leaves free. */
static uint64_t segment_bytes(const kvs_plan_svg *svg, const kvs_rank_plan *rp, size_t i) {
  const kvs_pool_breakdown *b = &rp->bytes;
  const kvs_memory_budget *t = svg->terms != NULL ? &svg->terms[rp->gpu] : NULL;
  uint64_t outside = 0;
  if (t != NULL) {
    uint64_t used = t->weights_bytes + t->budget_bytes + t->reserve_bytes;
    outside = t->memory_bytes > used ? t->memory_bytes - used : 0;
  }
  const uint64_t values[N_SEGMENTS] = {(t != NULL ? t->weights_bytes : 0) + rp->weight_bytes,
                                       b->window,
                                       b->compressed,
                                       b->indexer,
                                       b->state,
                                       b->index_state,
                                       b->mapping,
                                       b->scratch,
                                       rp->device.control_bytes + rp->device.padding_bytes,
                                       rp->headroom_bytes,
                                       t != NULL ? t->reserve_bytes : 0,
                                       outside};
  return values[i];
}

/* A bar's whole height: every segment. */
static uint64_t bar_bytes(const kvs_plan_svg *svg, const kvs_rank_plan *rp) {
  uint64_t sum = 0;
  for (size_t i = 0; i < N_SEGMENTS; i++) sum += segment_bytes(svg, rp, i);
  return sum;
}

/* Writes text with the five XML specials escaped. */
static void put_text(FILE *f, const char *text) {
  for (const char *p = text; p != NULL && *p != '\0'; p++) {
    switch (*p) {
      case '&':
        fputs("&amp;", f);
        break;
      case '<':
        fputs("&lt;", f);
        break;
      case '>':
        fputs("&gt;", f);
        break;
      case '"':
        fputs("&quot;", f);
        break;
      case '\'':
        fputs("&apos;", f);
        break;
      default:
        fputc(*p, f);
    }
  }
}

static void text_at(FILE *f, double x, double y, const char *anchor, const char *cls,
                    const char *text) {
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" class=\"%s\">", x, y, anchor, cls);
  put_text(f, text);
  fputs("</text>\n", f);
}

/* GPUs sharing a NUMA node (and package) form one box. */
typedef struct group {
  size_t node; /* the cluster node */
  int numa, package;
  size_t first_gpu; /* lowest list position: the boxes' order */
  size_t n;
  size_t *gpus; /* list positions, ascending */
} group;

static double scaled(uint64_t bytes, uint64_t max_bytes) {
  return max_bytes == 0 ? 0.0 : (double)AREA * (double)bytes / (double)max_bytes;
}

/* One stacked segment with its tooltip. */
static void draw_segment(FILE *f, const segment *seg, double x, double y, double h,
                         uint64_t bytes) {
  char line[160], b1[32];
  fprintf(f, "<rect x=\"%.1f\" y=\"%.2f\" width=\"%d\" height=\"%.2f\" fill=\"%s\"%s><title>", x, y,
          BAR, h, seg->color != NULL ? seg->color : "url(#headroom)",
          seg->color == NULL ? " stroke=\"#888\" stroke-dasharray=\"4 2\"" : "");
  snprintf(line, sizeof line, "%s: %llu bytes (%s)", seg->name, (unsigned long long)bytes,
           kvs_format_bytes(bytes, b1, sizeof b1));
  put_text(f, line);
  fputs("</title></rect>\n", f);
}

/* The labels under a bar: bus id, layers, pool, budget, memory. */
static void draw_bar_labels(FILE *f, const kvs_plan_svg *svg, const kvs_rank_plan *rp, double cx,
                            double bottom, bool limiting) {
  const kvs_gpu_info *gpu = &svg->gpus[rp->gpu];
  char line[96], b1[32];
  text_at(f, cx, bottom + 14, "middle", "mono", gpu->pci_busid);
  snprintf(line, sizeof line, "layers %zu-%zu", rp->first, rp->end - 1);
  text_at(f, cx, bottom + 28, "middle", "small", line);
  snprintf(line, sizeof line, "pool %s", kvs_format_bytes(rp->device.total_bytes, b1, sizeof b1));
  text_at(f, cx, bottom + 42, "middle", "small", line);
  snprintf(line, sizeof line, "KV %s", kvs_format_bytes(rp->budget_bytes, b1, sizeof b1));
  text_at(f, cx, bottom + 56, "middle", "small", line);
  snprintf(line, sizeof line, "of %s", kvs_format_bytes(bar_bytes(svg, rp), b1, sizeof b1));
  text_at(f, cx, bottom + 70, "middle", "small", line);
  if (limiting) text_at(f, cx, bottom + 84, "middle", "limit", "LIMITING");
}

static void draw_bar(FILE *f, const kvs_plan_svg *svg, const kvs_rank_plan *rp, double cx,
                     double top, uint64_t max_bytes, bool limiting) {
  const kvs_gpu_info *gpu = &svg->gpus[rp->gpu];
  char line[64];
  double bottom = top + TOP_LABELS + AREA;
  double x = cx - BAR / 2.0;
  double bar_h = scaled(bar_bytes(svg, rp), max_bytes);
  snprintf(line, sizeof line, "GPU %zu", gpu->index);
  text_at(f, cx, top + 12, "middle", "gpu", line);
  snprintf(line, sizeof line, "rank %zu", rp->rank);
  text_at(f, cx, top + 25, "middle", "small", line);
  snprintf(line, sizeof line, "tp %zu · pp %zu", rp->tp_rank, rp->pp_stage);
  text_at(f, cx, top + 38, "middle", "small", line);
  double y = bottom;
  for (size_t i = 0; i < N_SEGMENTS; i++) {
    uint64_t bytes = segment_bytes(svg, rp, i);
    if (bytes == 0) continue;
    double h = scaled(bytes, max_bytes);
    y -= h;
    draw_segment(f, &SEGMENTS[i], x, y, h, bytes);
  }
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.2f\" width=\"%d\" height=\"%.2f\" fill=\"none\" "
          "stroke=\"%s\" stroke-width=\"%s\"/>\n",
          x, bottom - bar_h, BAR, bar_h, limiting ? "#d62728" : "#333", limiting ? "3" : "1");
  draw_bar_labels(f, svg, rp, cx, bottom, limiting);
}

static void draw_legend(FILE *f, double x, double y) {
  text_at(f, x, y, "start", "gpu", "a GPU's memory (bottom up)");
  for (size_t i = 0; i < N_SEGMENTS; i++) {
    double row = y + 14 + 30.0 * (double)i;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\"%s/>\n", x, row,
            SEGMENTS[i].color != NULL ? SEGMENTS[i].color : "url(#headroom)",
            SEGMENTS[i].color == NULL ? " stroke=\"#888\" stroke-dasharray=\"4 2\"" : "");
    text_at(f, x + 20, row + 11, "start", "label", SEGMENTS[i].name);
    text_at(f, x + 20, row + 24, "start", "small", SEGMENTS[i].what);
  }
  double row = y + 14 + 30.0 * N_SEGMENTS;
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"none\" "
          "stroke=\"#d62728\" stroke-width=\"3\"/>\n",
          x, row);
  text_at(f, x + 20, row + 11, "start", "label", "limiting device");
  text_at(f, x + 20, row + 24, "start", "small", "cannot hold one more page");
}

/* The picture being drawn: what the writer's steps share. */
typedef struct drawing {
  const kvs_plan_svg *svg;
  const kvs_rank_plan **by_gpu; /* the rank on each GPU of the list, or NULL */
  group *groups;                /* the NUMA boxes, in order of their first GPU */
  size_t n_groups;
  size_t *members;      /* every box's GPU list, back to back */
  uint64_t max_bytes;   /* the scale: the tallest bar's bytes */
  size_t caption_lines; /* the most any box's caption needs */
  size_t limiting;      /* the rank outlined in red */
  double width, height, legend_x;
} drawing;

static void drawing_free(drawing *d) {
  free(d->by_gpu);
  free(d->groups);
  free(d->members);
}

/* Which rank sits on each GPU, and the largest budget, which sets the
 * scale of every bar. */
static kvs_status drawing_init(drawing *d, const kvs_plan_svg *svg, const char *path,
                               kvs_error *err) {
  size_t n = svg->n_gpus;
  memset(d, 0, sizeof *d);
  d->svg = svg;
  d->limiting = kvs_deployment_limiting_rank(svg->plan);
  d->by_gpu = calloc(n > 0 ? n : 1, sizeof *d->by_gpu);
  d->groups = calloc(n > 0 ? n : 1, sizeof *d->groups);
  d->members = calloc(n > 0 ? n : 1, sizeof *d->members);
  if (d->by_gpu == NULL || d->groups == NULL || d->members == NULL) {
    drawing_free(d);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "out of host memory drawing %s", path);
  }
  for (size_t r = 0; r < kvs_deployment_rank_count(svg->plan); r++) {
    const kvs_rank_plan *rp = kvs_deployment_rank(svg->plan, r);
    if (rp->gpu < n) d->by_gpu[rp->gpu] = rp;
    if (bar_bytes(svg, rp) > d->max_bytes) d->max_bytes = bar_bytes(svg, rp);
  }
  return KVS_OK;
}

static bool in_group(const group *gr, const kvs_gpu_info *gpu) {
  return gr->node == gpu->host && gr->numa == gpu->numa_node && gr->package == gpu->package;
}

/* Boxes: one per (node, NUMA node, package) holding a rank, in order of
 * their first GPU, each listing its GPUs in ascending order. */
static void group_gpus(drawing *d) {
  const kvs_gpu_info *gpus = d->svg->gpus;
  size_t n = d->svg->n_gpus, n_members = 0;
  for (size_t i = 0; i < n; i++) {
    if (d->by_gpu[i] == NULL) continue;
    size_t g = 0;
    while (g < d->n_groups && !in_group(&d->groups[g], &gpus[i])) g++;
    if (g == d->n_groups) {
      d->groups[g].node = gpus[i].host;
      d->groups[g].numa = gpus[i].numa_node;
      d->groups[g].package = gpus[i].package;
      d->groups[g].first_gpu = i;
      d->n_groups++;
    }
    d->groups[g].n++;
  }
  for (size_t g = 0; g < d->n_groups; g++) {
    d->groups[g].gpus = d->members + n_members;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
      if (d->by_gpu[i] != NULL && in_group(&d->groups[g], &gpus[i])) d->groups[g].gpus[k++] = i;
    }
    n_members += k;
  }
}

/* Characters of UTF-8 text (the titles hold "·"). */
static size_t chars_of(const char *text) {
  size_t n = 0;
  for (const char *p = text; p != NULL && *p != '\0'; p++) n += ((unsigned char)*p & 0xc0) != 0x80;
  return n;
}

/* How many characters of box text fit a box's width, and the caption's
 * height for its lines. */
static size_t box_room(double box_w) {
  return (size_t)(box_w / 6.2) > 8 ? (size_t)(box_w / 6.2) - 4 : 4;
}

static double caption_height(const drawing *d) {
  return 8.0 + CAPTION_LINE * (1.0 + (double)d->caption_lines);
}

/* The picture's size: the boxes side by side, the legend at the right,
 * tall enough for the bars or the legend, and wide enough for the title
 * lines; every box's caption as tall as the longest CPU list needs. */
static void measure(drawing *d) {
  double box_top = MARGIN + HEADER;
  d->width = MARGIN;
  d->caption_lines = 1;
  for (size_t g = 0; g < d->n_groups; g++) {
    double box_w = (double)d->groups[g].n * SLOT + 2 * BOX_PAD;
    d->width += box_w + BOX_GAP;
    size_t text = strlen("CPUs ") + strlen(d->svg->gpus[d->groups[g].gpus[0]].cpuset);
    size_t lines = (text + box_room(box_w) - 1) / box_room(box_w);
    if (lines > d->caption_lines) d->caption_lines = lines;
  }
  d->legend_x = d->width + 4;
  d->width += LEGEND;
  /* Bold 18 px and 13 px DejaVu Sans average about 11 and 7.5 px a
   * character: generous, so a title is never cut at the edge. */
  double title_w = 2 * MARGIN + 11.0 * (double)chars_of(d->svg->title);
  double subtitle_w = 2 * MARGIN + 7.5 * (double)chars_of(d->svg->subtitle);
  if (d->width < title_w) d->width = title_w;
  if (d->width < subtitle_w) d->width = subtitle_w;
  d->height = box_top + caption_height(d) + TOP_LABELS + AREA + BOTTOM_LABELS + 24 + MARGIN;
  double legend_h = box_top + 14 + 30.0 * N_SEGMENTS + 60 + MARGIN;
  if (d->height < legend_h) d->height = legend_h;
}

/* The XML prologue, the hatch pattern and styles, the title lines. */
static void write_prologue(FILE *f, const drawing *d) {
  fprintf(f,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
          "<defs><pattern id=\"headroom\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\" "
          "patternTransform=\"rotate(45)\"><rect width=\"8\" height=\"8\" fill=\"#f4f4f4\"/>"
          "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"8\" stroke=\"#cfcfcf\" stroke-width=\"3\"/>"
          "</pattern></defs>\n"
          "<style>.title{font-size:18px;font-weight:bold}.sub{font-size:13px;fill:#333}"
          ".gpu{font-size:12px;font-weight:bold}.label{font-size:12px}"
          ".small{font-size:10px;fill:#333}.mono{font-size:10px;font-family:monospace}"
          ".box{font-size:11px;fill:#1f3b57}.limit{font-size:10px;font-weight:bold;"
          "fill:#d62728}</style>\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          d->width, d->height, d->width, d->height);
  text_at(f, MARGIN, MARGIN + 18, "start", "title", d->svg->title);
  text_at(f, MARGIN, MARGIN + 40, "start", "sub", d->svg->subtitle);
}

/* A NUMA box's two caption lines: the node and package, then its CPUs. */
static void draw_caption(FILE *f, const drawing *d, const group *gr, double x, double box_top,
                         double box_w) {
  char line[KVS_CPUSET_STRING_MAX + 64];
  char numa[24] = "?", package[24] = "?";
  if (gr->numa >= 0) snprintf(numa, sizeof numa, "%d", gr->numa);
  if (gr->package >= 0) snprintf(package, sizeof package, "%d", gr->package);
  snprintf(line, sizeof line, "NUMA node %s · package %s", numa, package);
  text_at(f, x + BOX_PAD, box_top + 15, "start", "box", line);
  const char *cpus = d->svg->gpus[gr->gpus[0]].cpuset;
  snprintf(line, sizeof line, "CPUs %s", cpus[0] != '\0' ? cpus : "unknown");
  /* A long CPU list wraps inside the box, never cut. */
  size_t room = box_room(box_w), len = strlen(line);
  for (size_t at = 0, row = 0; at < len; at += room, row++) {
    char part[KVS_CPUSET_STRING_MAX + 64];
    snprintf(part, sizeof part, "%.*s", (int)room, line + at);
    text_at(f, x + BOX_PAD, box_top + 29 + CAPTION_LINE * (double)row, "start", "box", part);
  }
}

/* One NUMA box at x: its outline, caption and a bar per GPU. */
static void draw_group(FILE *f, const drawing *d, const group *gr, double x, double box_top,
                       double box_w, double box_h) {
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" rx=\"8\" "
          "fill=\"#f5f9fd\" stroke=\"#9bb7d4\"/>\n",
          x, box_top, box_w, box_h);
  draw_caption(f, d, gr, x, box_top, box_w);
  for (size_t k = 0; k < gr->n; k++) {
    const kvs_rank_plan *rp = d->by_gpu[gr->gpus[k]];
    double cx = x + BOX_PAD + SLOT * ((double)k + 0.5);
    draw_bar(f, d->svg, rp, cx, box_top + caption_height(d), d->max_bytes, rp->rank == d->limiting);
  }
}

/* A machine's box around its NUMA boxes, from node_x to end_x, its label
 * underneath. */
static void draw_machine(FILE *f, const drawing *d, size_t node, double node_x, double end_x,
                         double box_top, double box_h) {
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" rx=\"10\" "
          "fill=\"none\" stroke=\"#5b7fa6\" stroke-dasharray=\"6 3\"/>\n",
          node_x - 5, box_top - 5, end_x - node_x + 10, box_h + 26);
  char label[160];
  snprintf(label, sizeof label, "node %zu: %.120s", node,
           node < d->svg->n_hosts ? d->svg->host_labels[node] : "?");
  text_at(f, node_x, box_top + box_h + 16, "start", "box", label);
}

/* The boxes left to right; over a cluster, each machine's boxed too. */
static void draw_groups(FILE *f, const drawing *d, double box_top) {
  const double box_h = caption_height(d) + TOP_LABELS + AREA + BOTTOM_LABELS + 20;
  bool machines = d->svg->host_labels != NULL && d->svg->n_hosts > 1;
  double x = MARGIN, node_x = x;
  for (size_t g = 0; g < d->n_groups; g++) {
    const group *gr = &d->groups[g];
    double box_w = (double)gr->n * SLOT + 2 * BOX_PAD;
    if (machines && (g == 0 || d->groups[g - 1].node != gr->node)) node_x = x;
    draw_group(f, d, gr, x, box_top, box_w, box_h);
    x += box_w + BOX_GAP;
    if (machines && (g + 1 == d->n_groups || d->groups[g + 1].node != gr->node)) {
      draw_machine(f, d, gr->node, node_x, x - BOX_GAP, box_top, box_h);
    }
  }
}

/* Streams text to a path that is not a regular file (a pipe, a terminal,
 * /dev/stdout): nothing there to truncate. O_NONBLOCK: a FIFO nobody reads
 * fails at once (ENXIO) instead of waiting forever; one with a reader is
 * written as usual once the flag is cleared. */
static kvs_status stream_to(const char *path, const char *text, size_t len, kvs_error *err) {
  int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  int flags = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
  FILE *f = NULL;
  if (flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0) f = fdopen(fd, "w");
  if (f == NULL) {
    int why = errno;
    if (fd >= 0) close(fd);
    return kvs_error_set(err, KVS_ERR_IO, "cannot write SVG: %s: %s", path,
                         why == ENXIO ? "a FIFO nobody reads" : strerror(why));
  }
  bool ok = fwrite(text, 1, len, f) == len;
  ok &= fflush(f) == 0;
  int why = errno;
  ok &= fclose(f) == 0;
  if (!ok) return kvs_error_set(err, KVS_ERR_IO, "cannot write SVG: %s: %s", path, strerror(why));
  return KVS_OK;
}

/* Writes the drawn text to path. A regular file (or none yet) is replaced
 * atomically: a temporary file beside it, fsynced and renamed over it
 * (blocks/atomic_file.h), so a write that fails (a full disk) leaves the
 * previous map as it was instead of truncated in place; through a link to
 * one, the file it names. A directory is refused; anything else (a pipe,
 * a terminal, a device) is streamed to. */
static kvs_status write_text(const char *path, const char *text, size_t len, kvs_error *err) {
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return stream_to(path, text, len, err);
  }
  char *target = lstat(path, &st) == 0 && S_ISLNK(st.st_mode) ? realpath(path, NULL) : NULL;
  kvs_error why;
  kvs_status status = kvs_write_file_atomic(target != NULL ? target : path, text, len, &why);
  free(target);
  if (status != KVS_OK) return kvs_error_set(err, KVS_ERR_IO, "cannot write SVG: %s", why.message);
  return KVS_OK;
}

kvs_status kvs_plan_svg_write(const char *path, const kvs_plan_svg *svg, kvs_error *err) {
  drawing d;
  kvs_status status = drawing_init(&d, svg, path, err);
  if (status != KVS_OK) return status;
  group_gpus(&d);
  measure(&d);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) {
    drawing_free(&d);
    return kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to draw SVG '%s'", path);
  }
  double box_top = MARGIN + HEADER;
  write_prologue(f, &d);
  draw_groups(f, &d, box_top);
  draw_legend(f, d.legend_x, box_top + 12);
  char b1[32], note[128];
  snprintf(note, sizeof note, "bars to scale: the tallest is %s, a whole GPU's memory",
           kvs_format_bytes(d.max_bytes, b1, sizeof b1));
  text_at(f, MARGIN, d.height - MARGIN + 8, "start", "small", note);
  fputs("</svg>\n", f);
  bool drawn = ferror(f) == 0;
  drawn &= fclose(f) == 0;
  drawing_free(&d);
  status = drawn ? write_text(path, text, len, err)
                 : kvs_error_set(err, KVS_ERR_NO_MEMORY, "no memory to draw SVG '%s'", path);
  free(text);
  return status;
}
