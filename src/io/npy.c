/* NumPy .npy reading and writing (format versions 1.0, 2.0 and 3.0).
 *
 * File layout (numpy.lib.format):
 *   "\x93NUMPY" major minor
 *   header length: uint16 LE (1.x) or uint32 LE (2.x, 3.x)
 *   header: an ASCII (3.x: UTF-8) Python dict literal
 *           {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 *           padded with spaces and ended by '\n' so the data starts aligned.
 *   data:   product(shape) elements, C order.
 *
 * Only little-endian C-order float arrays are accepted: <f4, <f2, <f8; <i8 (int64) for index arrays; <u2 (uint16) for
 * bfloat16 bits. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/internal.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
/* NumPy (>= 1.24) leaves room for the first axis to grow to this many digits. */
#define NPY_GROWTH_AXIS_MAX_DIGITS 21

static size_t type_size(camdelta_npy_type t) {
  switch (t) {
    case CAMDELTA_NPY_F4: return 4;
    case CAMDELTA_NPY_F2: return 2;
    case CAMDELTA_NPY_F8: return 8;
    case CAMDELTA_NPY_I8: return 8;
    case CAMDELTA_NPY_U2: return 2;
  }
  return 0;
}

static const char *type_descr(camdelta_npy_type t) {
  switch (t) {
    case CAMDELTA_NPY_F4: return "<f4";
    case CAMDELTA_NPY_F2: return "<f2";
    case CAMDELTA_NPY_F8: return "<f8";
    case CAMDELTA_NPY_I8: return "<i8";
    case CAMDELTA_NPY_U2: return "<u2";
  }
  return NULL;
}

/* ------------------------------------------------------------ header parse */

typedef struct npy_header {
  camdelta_npy_type type;
  int ndim;
  size_t shape[CAMDELTA_NPY_MAX_DIMS];
  size_t count;
  size_t data_bytes;
  size_t data_offset; /* where the data starts */
} npy_header;

typedef struct cursor {
  const char *p, *end;
  const char *name; /* file name for messages */
} cursor;

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static void skip_ws(cursor *c) {
  while (c->p < c->end && is_space(*c->p)) c->p++;
}

static int peek(cursor *c) { return c->p < c->end ? (unsigned char)*c->p : -1; }

static camdelta_status bad(const cursor *c, const char *what) {
  return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: malformed .npy header: %s", c->name, what);
}

/* A Python string literal in ' or " quotes (no escapes needed for our keys
 * and descrs; a backslash is rejected). Copies at most cap-1 chars. */
static camdelta_status parse_string(cursor *c, char *buf, size_t cap) {
  int q = peek(c);
  if (q != '\'' && q != '"') return bad(c, "expected a quoted string");
  c->p++;
  size_t n = 0;
  while (c->p < c->end && *c->p != (char)q) {
    if (*c->p == '\\' || *c->p == '\n') return bad(c, "unsupported character in a string");
    if (n + 1 >= cap) return bad(c, "string too long");
    buf[n++] = *c->p++;
  }
  if (c->p >= c->end) return bad(c, "unterminated string");
  c->p++;
  buf[n] = '\0';
  return CAMDELTA_OK;
}

static int match_word(cursor *c, const char *w) {
  size_t n = strlen(w);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return 0;
  /* the word must end here (not e.g. "Trueish") */
  if ((size_t)(c->end - c->p) > n) {
    char nx = c->p[n];
    if ((nx >= 'a' && nx <= 'z') || (nx >= 'A' && nx <= 'Z') || (nx >= '0' && nx <= '9') || nx == '_') return 0;
  }
  c->p += n;
  return 1;
}

static camdelta_status parse_shape(cursor *c, npy_header *h) {
  if (peek(c) != '(') {
    if (peek(c) == '[') return bad(c, "'shape' must be a tuple, not a list");
    return bad(c, "'shape' must be a tuple of non-negative integers");
  }
  c->p++;
  int nd = 0;
  for (;;) {
    skip_ws(c);
    if (peek(c) == ')') {
      c->p++;
      break;
    }
    if (peek(c) == '-')
      return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: invalid .npy shape: negative dimension", c->name);
    if (peek(c) < '0' || peek(c) > '9') return bad(c, "'shape' must be a tuple of non-negative integers");
    size_t v = 0;
    while (peek(c) >= '0' && peek(c) <= '9') {
      size_t digit = (size_t)(*c->p - '0');
      if (v > (SIZE_MAX - digit) / 10)
        return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: invalid .npy shape: a dimension overflows size_t", c->name);
      v = v * 10 + digit;
      c->p++;
    }
    if (peek(c) == 'L' || peek(c) == 'l') c->p++; /* Python 2 long suffix */
    if (nd >= CAMDELTA_NPY_MAX_DIMS)
      return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: invalid .npy shape: more than %d dimensions", c->name,
                     CAMDELTA_NPY_MAX_DIMS);
    h->shape[nd++] = v;
    skip_ws(c);
    if (peek(c) == ',') {
      c->p++;
      continue;
    }
    if (peek(c) == ')') {
      if (nd == 1) return bad(c, "'shape' (n) is not a tuple; a 1-d shape is written (n,)");
      c->p++;
      break;
    }
    return bad(c, "expected ',' or ')' in 'shape'");
  }
  h->ndim = nd;
  return CAMDELTA_OK;
}

static camdelta_status parse_descr(cursor *c, npy_header *h) {
  if (peek(c) == '[') return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: unsupported .npy dtype: structured arrays", c->name);
  char d[32];
  camdelta_status st = parse_string(c, d, sizeof d);
  if (st) return st;
  if (strcmp(d, "<f4") == 0) h->type = CAMDELTA_NPY_F4;
  else if (strcmp(d, "<f2") == 0) h->type = CAMDELTA_NPY_F2;
  else if (strcmp(d, "<f8") == 0) h->type = CAMDELTA_NPY_F8;
  else if (strcmp(d, "<i8") == 0) h->type = CAMDELTA_NPY_I8;
  else if (strcmp(d, "<u2") == 0) h->type = CAMDELTA_NPY_U2;
  else if (d[0] == '>' && (strcmp(d + 1, "f4") == 0 || strcmp(d + 1, "f2") == 0 || strcmp(d + 1, "f8") == 0))
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: unsupported .npy dtype '%s': big-endian (expected <f4, <f2 or <f8)",
                   c->name, d);
  else
  {
    char shown[160];
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: unsupported .npy dtype '%s' (expected <f4, <f2 or <f8)", c->name,
                   cd_escape(d, (size_t)-1, shown, sizeof shown));
  }
  return CAMDELTA_OK;
}

/* Parse the dict in [p, end). */
static camdelta_status parse_dict(const char *p, const char *end, const char *name, npy_header *h) {
  cursor c = {p, end, name};
  int have_descr = 0, have_fortran = 0, have_shape = 0;
  camdelta_status st;
  skip_ws(&c);
  if (peek(&c) != '{') return bad(&c, "expected '{'");
  c.p++;
  for (;;) {
    skip_ws(&c);
    if (peek(&c) == '}') {
      c.p++;
      break;
    }
    char key[32];
    if ((st = parse_string(&c, key, sizeof key))) return st;
    skip_ws(&c);
    if (peek(&c) != ':') return bad(&c, "expected ':' after a key");
    c.p++;
    skip_ws(&c);
    if (strcmp(key, "descr") == 0) {
      if (have_descr++) return bad(&c, "duplicate key 'descr'");
      if ((st = parse_descr(&c, h))) return st;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (have_fortran++) return bad(&c, "duplicate key 'fortran_order'");
      if (match_word(&c, "True"))
        return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: unsupported .npy layout: fortran_order is True (expected C order)",
                       name);
      if (!match_word(&c, "False")) return bad(&c, "'fortran_order' must be True or False");
    } else if (strcmp(key, "shape") == 0) {
      if (have_shape++) return bad(&c, "duplicate key 'shape'");
      if ((st = parse_shape(&c, h))) return st;
    } else {
    {
      char shown[160];
      return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: malformed .npy header: unexpected key '%s'", name,
                     cd_escape(key, (size_t)-1, shown, sizeof shown));
    }
    }
    skip_ws(&c);
    if (peek(&c) == ',') {
      c.p++;
      continue;
    }
    if (peek(&c) == '}') {
      c.p++;
      break;
    }
    return bad(&c, "expected ',' or '}'");
  }
  /* Only padding may follow. */
  skip_ws(&c);
  if (c.p != c.end) return bad(&c, "unexpected text after the dict");
  if (!have_descr || !have_fortran || !have_shape)
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: malformed .npy header: missing key '%s'", name,
                   !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
  return CAMDELTA_OK;
}

/* Parse the preamble and header from the first `avail` bytes of a file of
 * `total` bytes. On success fills h (data_offset, count, data_bytes) and
 * checks that the data fits in `total`. */
static camdelta_status parse_header(const unsigned char *b, size_t avail, size_t total, const char *name,
                                    npy_header *h) {
  memset(h, 0, sizeof *h);
  if (memcmp(b, NPY_MAGIC, avail < NPY_MAGIC_LEN ? avail : NPY_MAGIC_LEN) != 0)
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: not a .npy file (bad magic; expected \\x93NUMPY)", name);
  if (avail < NPY_MAGIC_LEN + 2)
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: truncated .npy file (%zu bytes, no complete preamble)", name, total);
  unsigned major = b[6], minor = b[7];
  size_t len_bytes;
  if (major == 1) len_bytes = 2;
  else if (major == 2 || major == 3) len_bytes = 4;
  else
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: unsupported .npy format version %u.%u (expected 1.0, 2.0 or 3.0)",
                   name, major, minor);
  if (minor != 0)
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: unsupported .npy format version %u.%u (expected 1.0, 2.0 or 3.0)",
                   name, major, minor);
  size_t pre = NPY_MAGIC_LEN + 2 + len_bytes;
  if (avail < pre) return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: truncated .npy file (in the header length)", name);
  size_t hlen = 0;
  for (size_t i = 0; i < len_bytes; i++) hlen |= (size_t)b[8 + i] << (8 * i);
  if (hlen > avail - pre)
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: truncated .npy file (header of %zu bytes, only %zu present)", name,
                   hlen, avail - pre);
  const char *hs = (const char *)b + pre, *he = hs + hlen;
  if (memchr(hs, '\0', hlen)) return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: malformed .npy header: NUL byte", name);
  /* NumPy ends every header with '\n': a header length that is off (one byte short: the data would be read
   * shifted) shows here */
  if (hlen == 0 || hs[hlen - 1] != '\n') {
    char shown[64];
    return cd_fail(CAMDELTA_ERROR_FORMAT,
                   "%s: malformed .npy header: it does not end with a newline at the %zu bytes its length field "
                   "gives (ends with '%s')",
                   name, hlen, cd_escape(hlen >= 4 ? he - 4 : hs, hlen >= 4 ? 4 : hlen, shown, sizeof shown));
  }
  camdelta_status st = parse_dict(hs, he, name, h);
  if (st) return st;
  h->data_offset = pre + hlen;
  if (!cd_prod(&h->count, h->ndim, h->shape) || !cd_mul(&h->data_bytes, h->count, type_size(h->type)))
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: invalid .npy shape: the data size overflows size_t", name);
  size_t have = total - h->data_offset; /* total >= avail >= data_offset */
  if (h->data_bytes > have)
    return cd_fail(CAMDELTA_ERROR_FORMAT,
                   "%s: truncated .npy file: shape needs %zu data bytes, the file has %zu after the header", name,
                   h->data_bytes, have);
  if (h->data_bytes < have)
    return cd_fail(CAMDELTA_ERROR_FORMAT,
                   "%s: malformed .npy file: shape needs %zu data bytes, the file has %zu after the header (%zu "
                   "trailing bytes)",
                   name, h->data_bytes, have, have - h->data_bytes);
  return CAMDELTA_OK;
}

static void fill_out(camdelta_npy *out, const npy_header *h, void *data) {
  memset(out, 0, sizeof *out);
  out->type = h->type;
  out->ndim = h->ndim;
  for (int i = 0; i < h->ndim; i++) out->shape[i] = h->shape[i];
  out->count = h->count;
  out->data = data;
}

/* ------------------------------------------------------------------ public */

camdelta_status camdelta_npy_parse(const void *bytes, size_t size, camdelta_npy *out) {
  cd_clear_error();
  if (!out) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_parse: 'out' is NULL");
  memset(out, 0, sizeof *out);
  if (!bytes && size) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_parse: 'bytes' is NULL");
  static const unsigned char none[1] = {0};
  const unsigned char *b = bytes ? bytes : none;
  npy_header h = {0};
  camdelta_status st = parse_header(b, size, size, "<memory>", &h);
  if (st) return st;
  void *data = malloc(h.data_bytes ? h.data_bytes : 1);
  if (!data) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "<memory>: cannot allocate %zu bytes", h.data_bytes);
  if (h.data_bytes) memcpy(data, b + h.data_offset, h.data_bytes);
  fill_out(out, &h, data);
  return CAMDELTA_OK;
}

camdelta_status camdelta_npy_read(const char *path, camdelta_npy *out) {
  cd_clear_error();
  if (!out) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_read: 'out' is NULL");
  memset(out, 0, sizeof *out);
  if (!path) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_read: 'path' is NULL");
  char name[1200];
  cd_escape(path, (size_t)-1, name, sizeof name);
  /* O_NONBLOCK: a FIFO (or a device) in place of the file must not block the open; it is refused below */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return cd_fail(CAMDELTA_ERROR_IO, "%s: cannot open: %s", name, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return cd_fail(CAMDELTA_ERROR_IO, "%s: cannot stat: %s", name, strerror(e));
  }
  if (S_ISDIR(sb.st_mode)) {
    close(fd);
    return cd_fail(CAMDELTA_ERROR_IO, "%s: is a directory", name);
  }
  if (!S_ISREG(sb.st_mode) || sb.st_size < 0) {
    close(fd);
    return cd_fail(CAMDELTA_ERROR_IO, "%s: not a regular file (a FIFO, device or socket is refused)", name);
  }
  /* back to blocking reads for the regular file */
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    close(fd);
    return cd_fail(CAMDELTA_ERROR_IO, "%s: cannot open: %s", name, strerror(e));
  }
  camdelta_status st = CAMDELTA_OK;
  unsigned char *head = NULL;
  void *data = NULL;
  if ((uintmax_t)sb.st_size > (uintmax_t)SIZE_MAX) {
    st = cd_fail(CAMDELTA_ERROR_FORMAT, "%s: file too large for this platform", name);
    goto done;
  }
  size_t total = (size_t)sb.st_size;

  /* Preamble first, then the whole header (bounded by the file size). */
  unsigned char pre[12];
  size_t got = fread(pre, 1, sizeof pre < total ? sizeof pre : total, f);
  if (ferror(f)) {
    st = cd_fail(CAMDELTA_ERROR_IO, "%s: read error: %s", name, strerror(errno));
    goto done;
  }
  size_t head_len = got;
  if (got >= 8 && memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) == 0) {
    size_t len_bytes = pre[6] == 1 ? 2 : 4, hlen = 0;
    if (got >= 8 + len_bytes) {
      for (size_t i = 0; i < len_bytes; i++) hlen |= (size_t)pre[8 + i] << (8 * i);
      size_t want = 8 + len_bytes + hlen;
      head_len = want < total ? want : total;
    }
  }
  head = malloc(head_len ? head_len : 1);
  if (!head) {
    st = cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes for the header", name, head_len);
    goto done;
  }
  memcpy(head, pre, got < head_len ? got : head_len);
  if (head_len > got) {
    size_t more = fread(head + got, 1, head_len - got, f);
    if (more != head_len - got) {
      st = ferror(f) ? cd_fail(CAMDELTA_ERROR_IO, "%s: read error: %s", name, strerror(errno))
                     : cd_fail(CAMDELTA_ERROR_FORMAT, "%s: truncated .npy file (file shrank while reading)", name);
      goto done;
    }
  }
  npy_header h = {0};
  if ((st = parse_header(head, head_len, total, name, &h))) goto done;
  data = malloc(h.data_bytes ? h.data_bytes : 1);
  if (!data) {
    st = cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes for the data", name, h.data_bytes);
    goto done;
  }
  /* The file position is now at h.data_offset (the whole header was read). */
  if (h.data_bytes && fread(data, 1, h.data_bytes, f) != h.data_bytes) {
    st = ferror(f) ? cd_fail(CAMDELTA_ERROR_IO, "%s: read error: %s", name, strerror(errno))
                   : cd_fail(CAMDELTA_ERROR_FORMAT, "%s: truncated .npy file (data ends early)", name);
    goto done;
  }
  fill_out(out, &h, data);
  data = NULL;
done:
  free(data);
  free(head);
  fclose(f);
  return st;
}

/* The header NumPy writes for (type, shape) as format 1.0; returns its
 * length (a multiple of 64) or 0 if buf is too small. */
static size_t format_header(char *buf, size_t cap, camdelta_npy_type type, int ndim, const size_t *shape) {
  char dict[512];
  size_t n = 0;
  int w = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", type_descr(type));
  n = (size_t)w;
  for (int i = 0; i < ndim; i++) {
    w = snprintf(dict + n, sizeof dict - n, i == 0 ? "%zu" : ", %zu", shape[i]);
    n += (size_t)w;
  }
  w = snprintf(dict + n, sizeof dict - n, "%s), }", ndim == 1 ? "," : "");
  n += (size_t)w;
  if (ndim > 0) {
    /* spare room for the first axis to grow in place, as NumPy leaves */
    char first[32];
    int digits = snprintf(first, sizeof first, "%zu", shape[0]);
    for (int i = digits; i < NPY_GROWTH_AXIS_MAX_DIGITS; i++) dict[n++] = ' ';
  }
  /* NumPy: hlen = len(dict) + 1 (newline); padlen = 64 - (10 + hlen) % 64 (64 when already aligned). */
  size_t hlen = n + 1;
  size_t pad = NPY_ALIGN - (NPY_MAGIC_LEN + 4 + hlen) % NPY_ALIGN;
  size_t total = NPY_MAGIC_LEN + 4 + hlen + pad;
  if (total > cap || hlen + pad > 65535) return 0;
  memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
  buf[6] = 1;
  buf[7] = 0;
  buf[8] = (char)((hlen + pad) & 0xFF);
  buf[9] = (char)((hlen + pad) >> 8);
  memcpy(buf + 10, dict, n);
  memset(buf + 10 + n, ' ', pad);
  buf[total - 1] = '\n';
  return total;
}

/* A temporary name beside `path`: "<dir>/.<base>.tmp.<pid>.<time>.<n>" (hidden, so a listing of an output folder
 * never shows it as a result). */
static int temp_name(const char *path, char *tmp, size_t size) {
  static atomic_uint counter;
  const char *slash = strrchr(path, '/');
  const size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
  const char *base = slash ? slash + 1 : path;
  if (!*base) return 0;
  int w = snprintf(tmp, size, "%.*s.%s.tmp.%ld.%lx.%u", (int)dirlen, path, base, (long)getpid(),
                   (unsigned long)time(NULL), atomic_fetch_add(&counter, 1));
  return w > 0 && (size_t)w < size;
}

static int write_all(int fd, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n) {
    ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      return 0;
    }
    p += w;
    n -= (size_t)w;
  }
  return 1;
}

/* The arguments of a write, checked, and the header formatted: *hl header bytes, *bytes data bytes. `name` is the
 * escaped file name for the messages. */
static camdelta_status write_prepare(const char *name, camdelta_npy_type type, int ndim, const size_t *shape,
                                     const void *data, char header[640], size_t *hl, size_t *bytes) {
  if (!type_descr(type))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_write: %s: unknown type %d", name, (int)type);
  if (ndim < 0 || ndim > CAMDELTA_NPY_MAX_DIMS)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_write: %s: ndim %d out of range [0, %d]", name, ndim,
                   CAMDELTA_NPY_MAX_DIMS);
  if (ndim > 0 && !shape)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_write: %s: 'shape' is NULL", name);
  size_t count;
  if (!cd_prod(&count, ndim, shape) || !cd_mul(bytes, count, type_size(type)))
    return cd_fail(CAMDELTA_ERROR_OVERFLOW, "camdelta_npy_write: %s: the element count overflows size_t", name);
  if (*bytes && !data) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_write: %s: 'data' is NULL", name);
  *hl = format_header(header, 640, type, ndim, shape);
  if (!*hl) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_write: %s: header too long", name);
  return CAMDELTA_OK;
}

camdelta_status camdelta_npy_write_fd(int fd, const char *name, camdelta_npy_type type, int ndim, const size_t *shape,
                                      const void *data) {
  cd_clear_error();
  char shown[1200], header[640];
  cd_escape(name ? name : "(file)", (size_t)-1, shown, sizeof shown);
  if (fd < 0) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_write_fd: %s: 'fd' is %d", shown, fd);
  size_t hl, bytes;
  camdelta_status st = write_prepare(shown, type, ndim, shape, data, header, &hl, &bytes);
  if (st) return st;
  if (!write_all(fd, header, hl) || (bytes && !write_all(fd, data, bytes)) || fsync(fd) != 0)
    return cd_fail(CAMDELTA_ERROR_IO, "%s: write failed: %s", shown, strerror(errno));
  return CAMDELTA_OK;
}

camdelta_status camdelta_npy_write_temp(const char *path, camdelta_npy_type type, int ndim, const size_t *shape,
                                        const void *data, char *tmp_path, size_t tmp_size) {
  cd_clear_error();
  if (!path || !tmp_path || tmp_size == 0)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_write_temp: '%s' is NULL or empty",
                   path ? "tmp_path" : "path");
  tmp_path[0] = '\0';
  char name[1200], header[640];
  cd_escape(path, (size_t)-1, name, sizeof name);
  size_t hl, bytes;
  camdelta_status st = write_prepare(name, type, ndim, shape, data, header, &hl, &bytes);
  if (st) return st;
  struct stat sb;
  if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
    return cd_fail(CAMDELTA_ERROR_IO, "%s: cannot write: a folder is in the way", name);
  if (!temp_name(path, tmp_path, tmp_size))
    return cd_fail(CAMDELTA_ERROR_IO, "%s: cannot write: the path is too long", name);
  /* a new file that cannot be a planted link or an existing file */
  int fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    int e = errno;
    tmp_path[0] = '\0';
    return cd_fail(CAMDELTA_ERROR_IO, "%s: cannot create: %s", name, strerror(e));
  }
  int ok = write_all(fd, header, hl) && (!bytes || write_all(fd, data, bytes)) && fsync(fd) == 0;
  int saved_errno = errno;
  if (close(fd) != 0 && ok) {
    ok = 0;
    saved_errno = errno;
  }
  if (!ok) {
    unlink(tmp_path); /* no partial file left behind */
    tmp_path[0] = '\0';
    return cd_fail(CAMDELTA_ERROR_IO, "%s: write failed: %s", name, strerror(saved_errno));
  }
  return CAMDELTA_OK;
}

camdelta_status camdelta_npy_write(const char *path, camdelta_npy_type type, int ndim, const size_t *shape,
                                   const void *data) {
  char tmp[4200];
  camdelta_status st = camdelta_npy_write_temp(path, type, ndim, shape, data, tmp, sizeof tmp);
  if (st) return st;
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    char name[1200];
    return cd_fail(CAMDELTA_ERROR_IO, "%s: cannot replace: %s", cd_escape(path, (size_t)-1, name, sizeof name),
                   strerror(e));
  }
  return CAMDELTA_OK;
}

void camdelta_npy_free(camdelta_npy *npy) {
  if (!npy) return;
  free(npy->data);
  memset(npy, 0, sizeof *npy);
}

/* A 1-D little-endian int64 array (e.g. packed-clip offsets), through camdelta_npy_read. */
camdelta_status camdelta_npy_read_i64(const char *path, int64_t **data, size_t *count) {
  if (!path || !data || !count) {
    cd_clear_error();
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_npy_read_i64: '%s' is NULL",
                   !path ? "path" : !data ? "data" : "count");
  }
  *data = NULL, *count = 0;
  camdelta_npy a; /* the one reader: regular files only, exact lengths, escaped messages */
  camdelta_status st = camdelta_npy_read(path, &a);
  if (st) return st;
  char name[512];
  cd_escape(path, (size_t)-1, name, sizeof name);
  if (a.type != CAMDELTA_NPY_I8)
    st = cd_fail(CAMDELTA_ERROR_FORMAT, "%s: unsupported .npy dtype '%s' (expected <i8, little-endian int64)", name,
                 type_descr(a.type));
  else if (a.ndim != 1)
    st = cd_fail(CAMDELTA_ERROR_FORMAT, "%s: expected a 1-D int64 array, got %d dimensions", name, a.ndim);
  if (st) {
    camdelta_npy_free(&a);
    return st;
  }
  *data = a.data; /* malloc'd by the reader: the caller frees it with free() */
  *count = a.count;
  return CAMDELTA_OK;
}
