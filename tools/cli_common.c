/* Option parsing, error output and .npy <-> device helpers for the tool. */
#include "cli_common.h"
#include "cli_shape.h"
#include "usage.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ options */

int cli_flag(cli_args *a, const char *name) {
  if (a->i < a->argc && strcmp(a->argv[a->i], name) == 0) {
    a->i++;
    return 1;
  }
  return 0;
}

int cli_value(cli_args *a, const char *name, const char **value) {
  if (a->i >= a->argc) return 0;
  const char *arg = a->argv[a->i];
  size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0) return 0;
  if (arg[n] == '=') {
    *value = arg + n + 1;
    a->i++;
    return 1;
  }
  if (arg[n] != '\0') return 0;
  if (a->i + 1 >= a->argc) {
    cli_error(CLI_EXIT_USAGE, "option %s needs a value", name);
    return -1;
  }
  *value = a->argv[a->i + 1];
  a->i += 2;
  return 1;
}

int cli_run_operand(cli_args *a, cli_run_opts *o) {
  const char *arg = a->argv[a->i];
  if (arg[0] == '-' && arg[1] != '\0') {
    cli_error(CLI_EXIT_USAGE, "run: unknown option '%s' (see 'camdelta help run')", arg);
    return 0;
  }
  if (o->op_name) {
    cli_error(CLI_EXIT_USAGE, "run: unexpected argument '%s' (the operation is '%s')", arg, o->op_name);
    return 0;
  }
  o->op_name = arg;
  a->i++;
  return 1;
}

void cli_run_opts_init(cli_run_opts *o) {
  memset(o, 0, sizeof *o);
  o->norm_eps = 1e-6;
  o->algorithm = CAMDELTA_SCAN_AUTO;
}

int cli_run_option(cli_args *a, cli_run_opts *o) {
  const char *v = NULL;
  int r;
  if (cli_flag(a, "--help") || cli_flag(a, "-h")) {
    usage_run();
    return CLI_OPT_HELP;
  }
  if (cli_flag(a, "--quiet") || cli_flag(a, "-q")) {
    o->quiet = 1;
    return CLI_OPT_TAKEN;
  }
  if ((r = cli_value(a, "--in", &o->in)) || (r = cli_value(a, "--out", &o->out)) ||
      (r = cli_value(a, "--device", &o->device)))
    return r < 0 ? CLI_OPT_ERROR : CLI_OPT_TAKEN;
  if ((r = cli_value(a, "--k-scale", &v))) {
    if (r < 0 || !cli_parse_double("--k-scale", v, &o->k_scale)) return CLI_OPT_ERROR;
    o->have_k_scale = 1;
    return CLI_OPT_TAKEN;
  }
  if ((r = cli_value(a, "--norm-eps", &v))) {
    if (r < 0 || !cli_parse_double("--norm-eps", v, &o->norm_eps)) return CLI_OPT_ERROR;
    o->have_norm_eps = 1;
    return CLI_OPT_TAKEN;
  }
  if ((r = cli_value(a, "--algorithm", &v))) {
    if (r < 0 || !cli_parse_algorithm(v, &o->algorithm)) return CLI_OPT_ERROR;
    o->have_algorithm = 1;
    return CLI_OPT_TAKEN;
  }
  return CLI_OPT_OTHER;
}

int cli_parse_double(const char *opt, const char *text, double *out) {
  char *end;
  char shown[256];
  errno = 0;
  /* strtod alone takes "-1", " 1", "inf", "0x1p3": a plain non-negative decimal only */
  int ok = (text[0] >= '0' && text[0] <= '9') || (text[0] == '.' && text[1] >= '0' && text[1] <= '9');
  for (const char *p = text; ok && *p; p++) ok = (*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' ||
                                                  ((*p == '-' || *p == '+') && p > text && (p[-1] == 'e' || p[-1] == 'E'));
  double v = ok ? strtod(text, &end) : 0.0;
  if (!ok || end == text || *end != '\0' || errno == ERANGE || !isfinite(v) || v < 0) {
    cli_error(CLI_EXIT_USAGE, "option %s: '%s' is not a finite number >= 0", opt, cli_escape(text, shown, sizeof shown));
    return 0;
  }
  *out = v;
  return 1;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double cli_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

double cli_median(double *x, size_t n) {
  qsort(x, n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* The process's resident memory in MiB (Linux /proc; -1 elsewhere): on a CPU device (PoCL) device buffers are host
 * memory, so it shows device memory growth too. */
double cli_rss_mib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = -1, resident = -1;
  if (!f) return -1;
  const int n = fscanf(f, "%ld %ld", &pages, &resident);
  fclose(f);
  const long page = sysconf(_SC_PAGESIZE);
  return n == 2 && resident >= 0 && page > 0 ? (double)resident * (double)page / 1048576.0 : -1;
}

/* The index of `text` among names[0 .. n-1] (the library's own names of an enum's values 0 .. n-1); -1 after a usage
 * error "option OPT: 'TEXT' is not a, b or c". */
static int cli_pick_name(const char *opt, const char *text, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(text, names[i]) == 0) return i;
  char list[256] = "";
  size_t len = 0;
  for (int i = 0; i < n && len < sizeof list; i++)
    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", !i ? "" : i + 1 == n ? " or " : ", ", names[i]);
  cli_error(CLI_EXIT_USAGE, "option %s: '%s' is not %s", opt, text, list);
  return -1;
}

/* cli_parse_TYPE: the value of an enum TYPE (values 0 .. LAST, named by NAME_OF) that `text` names, for option OPT.
 * One definition for every enum: the library's name functions differ in their argument's type only. */
#define CLI_ENUM_PARSER(fn, type, opt, last, name_of)                     \
  int fn(const char *text, type *out) {                                    \
    const char *names[(last) + 1];                                         \
    for (int i = 0; i <= (last); i++) names[i] = name_of((type)i);         \
    const int i = cli_pick_name(opt, text, names, (last) + 1);             \
    if (i >= 0) *out = (type)i;                                            \
    return i >= 0;                                                         \
  }
CLI_ENUM_PARSER(cli_parse_algorithm, camdelta_scan_algorithm, "--algorithm", CAMDELTA_SCAN_CHUNKWISE,
                camdelta_scan_algorithm_name)
CLI_ENUM_PARSER(cli_parse_strategy, camdelta_chunk_strategy, "--chunk-strategy", CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE,
                camdelta_chunk_strategy_name)
CLI_ENUM_PARSER(cli_parse_precision, camdelta_precision, "--precision", CAMDELTA_PRECISION_TF32,
                camdelta_precision_name)
#undef CLI_ENUM_PARSER

/* ------------------------------------------------------------ tensors */

const char *cli_shape_str(char *buf, size_t size, int ndim, const size_t *shape) {
  size_t n = 0;
  int w = snprintf(buf, size, "(");
  n = w > 0 ? (size_t)w : 0;
  for (int i = 0; i < ndim && n < size; i++) {
    w = snprintf(buf + n, size - n, i ? ", %zu" : "%zu", shape[i]);
    if (w < 0) break;
    n += (size_t)w;
  }
  if (n < size) snprintf(buf + n, size - n, "%s)", ndim == 1 ? "," : "");
  return buf;
}

static const char *type_name(camdelta_npy_type t) {
  return t == CAMDELTA_NPY_F4 ? "<f4" : t == CAMDELTA_NPY_F2 ? "<f2" : t == CAMDELTA_NPY_F8 ? "<f8"
         : t == CAMDELTA_NPY_I8 ? "<i8" : t == CAMDELTA_NPY_U2 ? "<u2" : "?";
}

int cli_tensor_load(cli_tensor *t, const char *dir, const char *name, int optional, const char *expect) {
  memset(t, 0, sizeof *t);
  int w = snprintf(t->path, sizeof t->path, "%s/%s.npy", dir, name);
  if (w < 0 || (size_t)w >= sizeof t->path) return cli_error(CLI_EXIT_USAGE, "--in: path too long: %s", dir);
  struct stat sb;
  if (stat(t->path, &sb) != 0 && errno == ENOENT) {
    if (optional) return CLI_EXIT_OK;
    return cli_error(CLI_EXIT_INPUT, "%s: missing input file (expected a <f4, <f2 or <f8 array of shape %s)", t->path,
                     expect);
  }
  camdelta_status st = camdelta_npy_read(t->path, &t->npy);
  if (st != CAMDELTA_OK) {
    /* the library's message already starts with the path */
    return cli_error(CLI_EXIT_INPUT, "%s; expected shape %s", camdelta_last_message(), expect);
  }
  t->present = 1;
  for (int i = 0; i < t->npy.ndim; i++)
    if (t->npy.shape[i] == 0) {
      /* no operation takes an empty tensor; sizes claimed beside a zero would otherwise reach the size checks of a
       * file that holds nothing */
      char have[256];
      return cli_error(CLI_EXIT_INPUT, "%s: shape %s has a zero dimension (every size must be at least 1; expected %s)",
                       t->path, cli_shape_str(have, sizeof have, t->npy.ndim, t->npy.shape), expect);
    }
  return CLI_EXIT_OK;
}

int cli_tensor_expect(const cli_tensor *t, int ndim, const size_t *shape, const char *symbols) {
  int ok = t->npy.ndim == ndim;
  for (int i = 0; ok && i < ndim; i++) ok = t->npy.shape[i] == shape[i];
  if (ok) return CLI_EXIT_OK;
  char have[256], want[256];
  return cli_error(CLI_EXIT_INPUT, "%s: shape %s does not fit: expected %s = %s", t->path,
                   cli_shape_str(have, sizeof have, t->npy.ndim, t->npy.shape), symbols,
                   cli_shape_str(want, sizeof want, ndim, shape));
}

int cli_tensor_load_shaped(cli_tensor *t, const char *dir, const char *name, int optional, int ndim,
                           const size_t *shape, const char *symbols) {
  char nums[256], expect[512];
  if (ndim > 0)
    snprintf(expect, sizeof expect, "%s = %s", symbols, cli_shape_str(nums, sizeof nums, ndim, shape));
  else
    snprintf(expect, sizeof expect, "%s", symbols);
  int rc = cli_tensor_load(t, dir, name, optional, expect);
  if (rc || !t->present) return rc;
  if (ndim > 0 && (rc = cli_tensor_expect(t, ndim, shape, symbols))) return rc;
  if (ndim < 0 && t->npy.ndim != -ndim) {
    char have[256];
    return cli_error(CLI_EXIT_INPUT, "%s: shape %s does not fit: expected %d dimensions %s", t->path,
                     cli_shape_str(have, sizeof have, t->npy.ndim, t->npy.shape), -ndim, symbols);
  }
  return CLI_EXIT_OK;
}

int cli_tensor_load_f32(cli_tensor *t, const char *dir, const char *name, int optional, int ndim, const size_t *shape,
                        const char *symbols) {
  const int rc = cli_tensor_load_shaped(t, dir, name, optional, ndim, shape, symbols);
  return rc ? rc : cli_tensor_convert(t, CAMDELTA_NPY_F4);
}

int cli_load_scan_inputs(cli_tensor t[CLI_SCAN_COUNT], const char *in, int backward, const size_t tok[4],
                         const char *tok_sym, const size_t dc[3], const char *dc_sym, const size_t st[4],
                         const char *st_sym) {
  int rc = cli_tensor_load_f32(&t[CLI_SCAN_K], in, "k", 0, 4, tok, tok_sym);
  if (!rc) rc = cli_tensor_load_f32(&t[CLI_SCAN_V], in, "v", 0, 4, tok, tok_sym);
  if (!rc) rc = cli_tensor_load_f32(&t[CLI_SCAN_DECAY], in, "decay", 0, 3, dc, dc_sym);
  if (!rc && backward) rc = cli_tensor_load_f32(&t[CLI_SCAN_GO], in, "grad_out", 0, 4, tok, tok_sym);
  if (!rc) rc = cli_tensor_load_f32(&t[CLI_SCAN_INIT], in, "init_state", 1, 4, st, st_sym);
  if (!rc && backward) rc = cli_tensor_load_f32(&t[CLI_SCAN_GF], in, "grad_final_state", 1, 4, st, st_sym);
  return rc;
}

int cli_tensor_convert(cli_tensor *t, camdelta_npy_type type) {
  if (!t->present || t->npy.type == type) return CLI_EXIT_OK;
  if (t->npy.type == CAMDELTA_NPY_U2 || type == CAMDELTA_NPY_U2)
    return cli_error(CLI_EXIT_INPUT, "%s: dtype <u2 (bfloat16 bits) is taken for the activations of branch and "
                     "branch-backward with --dtype bf16 only; here %s is expected",
                     t->path, type == CAMDELTA_NPY_U2 ? "<u2" : "a float array (<f4, <f2 or <f8)");
  if (t->npy.type == CAMDELTA_NPY_I8 || type == CAMDELTA_NPY_I8)
    return cli_error(CLI_EXIT_INPUT, "%s: dtype %s where %s is expected", t->path,
                     t->npy.type == CAMDELTA_NPY_I8 ? "<i8 (integers)" : type_name(t->npy.type),
                     type == CAMDELTA_NPY_I8 ? "<i8 (int64 indices)" : "a float array (<f4, <f2 or <f8)");
  size_t n = t->npy.count, es = type == CAMDELTA_NPY_F2 ? 2 : type == CAMDELTA_NPY_F4 ? 4 : 8;
  if (n > SIZE_MAX / es) return cli_error(CLI_EXIT_INPUT, "%s: %zu elements overflow size_t as %s", t->path, n,
                                          type_name(type));
  unsigned char *dst = malloc(n ? n * es : 1);
  if (!dst) return cli_error(CLI_EXIT_FAILURE, "%s: out of host memory converting %s", t->path, type_name(t->npy.type));
  const unsigned char *src = t->npy.data;
  for (size_t i = 0; i < n; i++) {
    double v;
    if (t->npy.type == CAMDELTA_NPY_F8) {
      memcpy(&v, src + 8 * i, 8);
    } else if (t->npy.type == CAMDELTA_NPY_F4) {
      float f;
      memcpy(&f, src + 4 * i, 4);
      v = f;
    } else {
      uint16_t h;
      memcpy(&h, src + 2 * i, 2);
      v = camdelta_f16_to_f32(h);
    }
    if (type == CAMDELTA_NPY_F8) {
      memcpy(dst + 8 * i, &v, 8);
    } else if (type == CAMDELTA_NPY_F4) {
      float f = (float)v;
      memcpy(dst + 4 * i, &f, 4);
    } else {
      uint16_t h = camdelta_f32_to_f16((float)v);
      memcpy(dst + 2 * i, &h, 2);
    }
  }
  free(t->npy.data);
  t->npy.data = dst;
  t->npy.type = type;
  return CLI_EXIT_OK;
}

camdelta_npy_type cli_npy_type_of(camdelta_dtype dtype) {
  return dtype == CAMDELTA_F16 ? CAMDELTA_NPY_F2 : dtype == CAMDELTA_BF16 ? CAMDELTA_NPY_U2 : CAMDELTA_NPY_F4;
}

int cli_tensor_activations(cli_tensor *t, camdelta_dtype dtype) {
  if (!t->present || (dtype == CAMDELTA_BF16 && t->npy.type == CAMDELTA_NPY_U2)) return CLI_EXIT_OK;
  if (dtype != CAMDELTA_BF16) return cli_tensor_convert(t, cli_npy_type_of(dtype));
  int rc = cli_tensor_convert(t, CAMDELTA_NPY_F4);
  if (rc) return rc;
  /* in place: element i's two bytes land at 2i, within floats already read */
  unsigned char *d = t->npy.data;
  for (size_t i = 0; i < t->npy.count; i++) {
    float f;
    memcpy(&f, d + 4 * i, 4);
    const uint16_t h = camdelta_f32_to_bf16(f);
    memcpy(d + 2 * i, &h, 2);
  }
  t->npy.type = CAMDELTA_NPY_U2;
  return CLI_EXIT_OK;
}

int cli_parse_dtype(const char *what, const char *v, camdelta_dtype *out) {
  if (strcmp(v, "f32") == 0) *out = CAMDELTA_F32;
  else if (strcmp(v, "f16") == 0) *out = CAMDELTA_F16;
  else if (strcmp(v, "bf16") == 0) *out = CAMDELTA_BF16;
  else return cli_error(CLI_EXIT_USAGE, "%s: --dtype must be f32, f16 or bf16 (got '%s')", what, v);
  return CLI_EXIT_OK;
}

void cli_tensor_free(cli_tensor *t) {
  camdelta_npy_free(&t->npy);
  t->present = 0;
}

/* The data's size in bytes; it was in host memory (as read, or as converted with a checked size): no overflow. */
static size_t npy_bytes(const camdelta_npy *n) {
  return n->count * (n->type == CAMDELTA_NPY_F2 || n->type == CAMDELTA_NPY_U2 ? 2 : n->type == CAMDELTA_NPY_F4 ? 4 : 8);
}

int cli_upload(camdelta_context *ctx, const cli_tensor *t, cl_mem *out) {
  size_t bytes = npy_bytes(&t->npy);
  cl_int err;
  *out = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
  if (err != CL_SUCCESS) {
    *out = NULL;
    return cli_error(CLI_EXIT_DEVICE, "%s: cannot allocate %zu bytes on the device: %s", t->path, bytes,
                     camdelta_cl_error_name(err));
  }
  if (bytes) {
    err = clEnqueueWriteBuffer(camdelta_context_queue(ctx), *out, CL_TRUE, 0, bytes, t->npy.data, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
      clReleaseMemObject(*out);
      *out = NULL;
      return cli_error(CLI_EXIT_DEVICE, "%s: upload failed: %s", t->path, camdelta_cl_error_name(err));
    }
  }
  return CLI_EXIT_OK;
}

int cli_alloc(camdelta_context *ctx, size_t bytes, cl_mem *out) {
  cl_int err;
  if (bytes == 0) bytes = 4;
  *out = clCreateBuffer(camdelta_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) {
    *out = NULL;
    return cli_error(CLI_EXIT_DEVICE, "cannot allocate %zu bytes on the device: %s", bytes,
                     camdelta_cl_error_name(err));
  }
  /* zero-fill, so nothing stale can ever be written out */
  void *zero = calloc(1, bytes);
  if (!zero) return cli_error(CLI_EXIT_FAILURE, "out of host memory (%zu bytes)", bytes);
  err = clEnqueueWriteBuffer(camdelta_context_queue(ctx), *out, CL_TRUE, 0, bytes, zero, 0, NULL, NULL);
  free(zero);
  if (err != CL_SUCCESS)
    return cli_error(CLI_EXIT_DEVICE, "cannot clear a device buffer: %s", camdelta_cl_error_name(err));
  return CLI_EXIT_OK;
}

int cli_context(camdelta_context **ctx, const char *selector) {
  camdelta_status st = camdelta_context_create(ctx, selector);
  if (st == CAMDELTA_OK) return CLI_EXIT_OK;
  *ctx = NULL;
  return cli_device_error(st, selector);
}

/* ------------------------------------------------------------ outputs */

int cli_output_alloc(camdelta_context *ctx, cli_output *out, const char *name, camdelta_npy_type type, int ndim,
                     const size_t *shape) {
  out->name = name;
  out->mem = NULL;
  out->type = type;
  out->ndim = ndim;
  if (ndim < 0 || ndim > 5) return cli_error(CLI_EXIT_FAILURE, "internal: output %s has %d dimensions", name, ndim);
  size_t count = 1;
  for (int i = 0; i < ndim; i++) out->shape[i] = shape[i];
  const size_t es = type == CAMDELTA_NPY_F2 || type == CAMDELTA_NPY_U2 ? 2 : 4;
  cli_budget b = {0, 0, 0, 0};
  if (!camdelta_size_prod(&count, (size_t)ndim, shape)) b.overflow = 1;
  cli_budget_device(&b, 1, count, es);
  char what[160];
  snprintf(what, sizeof what, "output %s", name);
  int rc = cli_budget_check(&b, ctx, what); /* a size the device cannot hold is the input's fault (exit 3) */
  return rc ? rc : cli_alloc(ctx, count * es, &out->mem);
}

int cli_write_outputs(camdelta_context *ctx, const char *dir, const cli_output *outs, int n) {
  int rc;
  cli_outset *set = cli_outset_open(dir, &rc); /* all or nothing: tools/cli_outset.h */
  if (!set) return rc;
  for (int k = 0; k < n; k++) {
    rc = cli_outset_add_device(set, ctx, outs[k].mem, outs[k].name, outs[k].type, outs[k].ndim, outs[k].shape);
    if (rc) return rc; /* the set is aborted: no temporary file left, previous outputs untouched */
  }
  return cli_outset_commit(set);
}

int cli_run_finish(camdelta_context *ctx, camdelta_status st, const char *call, const camdelta_profile *prof,
                   const char *op_name, const char *detail, const cli_output *outs, int n, const char *dir, int quiet) {
  if (st != CAMDELTA_OK) return cli_lib_error(st, call);
  camdelta_status fs = camdelta_finish(ctx);
  if (fs != CAMDELTA_OK) return cli_lib_error(fs, call);
  int rc = cli_write_outputs(ctx, dir, outs, n);
  if (rc) return rc;
  if (!quiet) {
    camdelta_device_info info;
    const char *dev = camdelta_context_info(ctx, &info) == CAMDELTA_OK ? info.device_name : "?";
    char ms[48] = "no kernel times from the driver";
    if (!isnan(prof->kernel_ms)) snprintf(ms, sizeof ms, "%.3f ms", prof->kernel_ms);
    printf("camdelta run %s: %s on %s: %s in %u kernels; wrote", op_name, detail, dev, ms, prof->kernels);
    for (int k = 0; k < n; k++) printf(" %s", outs[k].name);
    printf(" to %s\n", dir);
  }
  return CLI_EXIT_OK;
}

int cli_reps_option(cli_args *a, size_t *reps, size_t *warmup) {
  const char *v = NULL;
  int r = cli_value(a, "--reps", &v);
  if (r > 0) return cli_parse_count("--reps", v, 1, CLI_MAX_REPS, reps) ? 1 : -1;
  if (!r && (r = cli_value(a, "--warmup", &v)) > 0) return cli_parse_count("--warmup", v, 0, CLI_MAX_REPS, warmup) ? 1 : -1;
  return r;
}

int cli_sp_option(cli_args *a, int *branch, camdelta_scan_algorithm *alg) {
  const char *v = NULL;
  if (cli_flag(a, "--sequence-parallel")) return 1;
  if (cli_flag(a, "--no-branch")) return *branch = 0, 1;
  const int r = cli_value(a, "--algorithm", &v);
  return r > 0 ? (cli_parse_algorithm(v, alg) ? 1 : -1) : r;
}

void cli_look_at_origin(const double c[3], double yaw, float cc[16]) {
  double z[3] = {-c[0], -c[1], -c[2]}, n = sqrt(z[0] * z[0] + z[1] * z[1] + z[2] * z[2]);
  for (int i = 0; i < 3; i++) z[i] /= n;
  if (yaw != 0) {
    const double cy = cos(yaw), sy = sin(yaw), z0 = z[0] * cy + z[2] * sy, z2 = -z[0] * sy + z[2] * cy;
    z[0] = z0, z[2] = z2;
  }
  double x[3] = {z[2], 0, -z[0]}; /* up (0, 1, 0) x z */
  n = sqrt(x[0] * x[0] + x[2] * x[2]);
  x[0] /= n, x[2] /= n;
  const double y[3] = {z[1] * x[2] - z[2] * x[1], z[2] * x[0] - z[0] * x[2], z[0] * x[1] - z[1] * x[0]};
  for (int i = 0; i < 3; i++)
    cc[4 * i + 0] = (float)x[i], cc[4 * i + 1] = (float)y[i], cc[4 * i + 2] = (float)z[i], cc[4 * i + 3] = (float)c[i];
  cc[12] = cc[13] = cc[14] = 0, cc[15] = 1;
}

int cli_seed_option(cli_args *a, unsigned long long *state) {
  const char *v = NULL;
  size_t seed;
  const int r = cli_value(a, "--seed", &v);
  if (r <= 0) return r;
  if (!cli_parse_size("--seed", v, &seed)) return -1;
  *state ^= (unsigned long long)seed * 0x9E3779B97F4A7C15ull;
  return 1;
}

int cli_demo_option(cli_args *a, cli_shape *shape, camdelta_chunk_strategy *strategy, const char **device,
                    unsigned long long *seed) {
  const char *v = NULL;
  int r;
  if ((r = cli_value(a, "--shape", &v))) return r > 0 && cli_parse_shape("demo", "--shape", v, 1, shape) ? 1 : -1;
  if ((r = cli_value(a, "--chunk-strategy", &v))) return r > 0 && cli_parse_strategy(v, strategy) ? 1 : -1;
  if ((r = cli_value(a, "--device", device))) return r;
  return cli_seed_option(a, seed);
}

int cli_help_or_unknown(cli_args *a, const char *what, const char *topic, void (*usage)(void)) {
  if (cli_flag(a, "--help") || cli_flag(a, "-h")) {
    usage();
    return 1;
  }
  cli_error(CLI_EXIT_USAGE, "%s: unknown option '%s' (see 'camdelta help %s')", what, a->argv[a->i], topic);
  return 0;
}

int cli_context_for(camdelta_context **ctx, const char *selector, const cli_budget *bud, const char *what) {
  *ctx = NULL;
  int rc = cli_budget_check(bud, NULL, what); /* the host, no device yet */
  if (rc || (rc = cli_context(ctx, selector))) return rc;
  if ((rc = cli_budget_check(bud, *ctx, what))) {
    camdelta_context_destroy(*ctx);
    *ctx = NULL;
  }
  return rc;
}
