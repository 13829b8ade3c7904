/* Option parsing, error output and .npy <-> device helpers for the tool. */
#include "cli_common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cli_error(int code, const char *fmt, ...) {
  va_list ap;
  fputs("camdelta: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return code;
}

int cli_exit_code(camdelta_status st) {
  switch (st) {
    case CAMDELTA_OK: return CLI_EXIT_OK;
    case CAMDELTA_ERROR_INVALID_ARGUMENT:
    case CAMDELTA_ERROR_SHAPE:
    case CAMDELTA_ERROR_UNSUPPORTED:
    case CAMDELTA_ERROR_BUFFER_TOO_SMALL:
    case CAMDELTA_ERROR_OVERFLOW:
    case CAMDELTA_ERROR_FORMAT: return CLI_EXIT_INPUT;
    case CAMDELTA_ERROR_OUT_OF_MEMORY:
    case CAMDELTA_ERROR_DEVICE_NOT_FOUND:
    case CAMDELTA_ERROR_OPENCL:
    case CAMDELTA_ERROR_BUILD: return CLI_EXIT_DEVICE;
    case CAMDELTA_ERROR_IO: return CLI_EXIT_FAILURE;
  }
  return CLI_EXIT_FAILURE;
}

/* The library's message on one line: newlines (a build log) become "; ". */
static void one_line(const char *msg, char *buf, size_t size) {
  size_t n = 0;
  for (const char *p = msg; *p && n + 3 < size; p++) {
    if (*p == '\n') {
      while (p[1] == ' ' || p[1] == '\t' || p[1] == '\n') p++;
      if (p[1] == '\0') break;
      if (n > 0 && buf[n - 1] != ':') buf[n++] = ';';
      buf[n++] = ' ';
    } else {
      buf[n++] = *p;
    }
  }
  buf[n] = '\0';
}

int cli_lib_error(camdelta_status st, const char *what) {
  static char line[8192];
  one_line(camdelta_last_message(), line, sizeof line);
  if (!line[0]) snprintf(line, sizeof line, "%s", camdelta_status_name(st));
  size_t n = strlen(what);
  if (strncmp(line, what, n) == 0 && line[n] == ':') return cli_error(cli_exit_code(st), "%s", line);
  return cli_error(cli_exit_code(st), "%s: %s", what, line);
}

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

int cli_parse_double(const char *opt, const char *text, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v)) {
    cli_error(CLI_EXIT_USAGE, "option %s: '%s' is not a finite number", opt, text);
    return 0;
  }
  *out = v;
  return 1;
}

int cli_parse_size(const char *opt, const char *text, size_t *out) {
  char *end;
  errno = 0;
  if (text[0] < '0' || text[0] > '9') {
    cli_error(CLI_EXIT_USAGE, "option %s: '%s' is not a positive integer", opt, text);
    return 0;
  }
  unsigned long long v = strtoull(text, &end, 10);
  if (*end != '\0' || errno == ERANGE || v == 0 || v > (unsigned long long)SIZE_MAX) {
    cli_error(CLI_EXIT_USAGE, "option %s: '%s' is not a positive integer", opt, text);
    return 0;
  }
  *out = (size_t)v;
  return 1;
}

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
         : t == CAMDELTA_NPY_I8 ? "<i8" : "?";
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

int cli_tensor_convert(cli_tensor *t, camdelta_npy_type type) {
  if (!t->present || t->npy.type == type) return CLI_EXIT_OK;
  if (t->npy.type == CAMDELTA_NPY_I8 || type == CAMDELTA_NPY_I8)
    return cli_error(CLI_EXIT_INPUT, "%s: dtype %s where %s is expected", t->path,
                     t->npy.type == CAMDELTA_NPY_I8 ? "<i8 (integers)" : type_name(t->npy.type),
                     type == CAMDELTA_NPY_I8 ? "<i8 (int64 indices)" : "a float array (<f4, <f2 or <f8)");
  size_t n = t->npy.count, es = type == CAMDELTA_NPY_F2 ? 2 : type == CAMDELTA_NPY_F4 ? 4 : 8;
  unsigned char *dst = malloc(n ? n * es : 1); /* n * es fits: the source of n elements (>= 2 bytes) was in memory */
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

void cli_tensor_free(cli_tensor *t) {
  camdelta_npy_free(&t->npy);
  t->present = 0;
}

static size_t npy_bytes(const camdelta_npy *n) {
  return n->count * (n->type == CAMDELTA_NPY_F2 ? 2 : n->type == CAMDELTA_NPY_F4 ? 4 : 8);
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

int cli_download_write(camdelta_context *ctx, cl_mem mem, const char *dir, const char *name, camdelta_npy_type type,
                       int ndim, const size_t *shape) {
  char path[4096];
  int w = snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  if (w < 0 || (size_t)w >= sizeof path) return cli_error(CLI_EXIT_USAGE, "--out: path too long: %s", dir);
  size_t count = 1, es = type == CAMDELTA_NPY_F2 ? 2 : type == CAMDELTA_NPY_F4 ? 4 : 8;
  for (int i = 0; i < ndim; i++) count *= shape[i]; /* fits: the buffer of count elements exists */
  void *host = malloc(count ? count * es : 1);
  if (!host) return cli_error(CLI_EXIT_FAILURE, "%s: out of host memory", path);
  if (count) {
    cl_int err =
        clEnqueueReadBuffer(camdelta_context_queue(ctx), mem, CL_TRUE, 0, count * es, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
      free(host);
      return cli_error(CLI_EXIT_DEVICE, "%s: reading the result from the device failed: %s", path,
                       camdelta_cl_error_name(err));
    }
  }
  camdelta_status st = camdelta_npy_write(path, type, ndim, shape, host);
  free(host);
  if (st != CAMDELTA_OK) return cli_error(CLI_EXIT_FAILURE, "%s", camdelta_last_message());
  return CLI_EXIT_OK;
}

int cli_make_dir(const char *dir) {
  char tmp[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof tmp) return cli_error(CLI_EXIT_USAGE, "--out: bad folder name '%s'", dir);
  memcpy(tmp, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (tmp[i] == '/' || tmp[i] == '\0') {
      char c = tmp[i];
      tmp[i] = '\0';
      if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
        return cli_error(CLI_EXIT_FAILURE, "%s: cannot create folder: %s", tmp, strerror(errno));
      tmp[i] = c;
    }
  }
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return cli_error(CLI_EXIT_FAILURE, "%s: not a folder", dir);
  return CLI_EXIT_OK;
}

int cli_device_error(camdelta_status st, const char *selector) {
  const char *env = getenv("CAMDELTA_DEVICE");
  const char *sel = selector ? selector : env && *env ? env : "default";
  /* every failure to get a device is a device error (4), whatever status it carries */
  static char line[8192];
  one_line(camdelta_last_message(), line, sizeof line);
  return cli_error(CLI_EXIT_DEVICE, "device '%s': %s", sel, line[0] ? line : camdelta_status_name(st));
}

int cli_context(camdelta_context **ctx, const char *selector) {
  camdelta_status st = camdelta_context_create(ctx, selector);
  if (st == CAMDELTA_OK) return CLI_EXIT_OK;
  *ctx = NULL;
  return cli_device_error(st, selector);
}
