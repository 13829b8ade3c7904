/* The saved image of a stream: header, parser, file reader (stream_image.h). Every number little-endian. */
#include "ops/stream_image.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t cd_fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Header layout (byte offsets). */
enum {
  AT_MAGIC = 0, AT_VERSION = 8, AT_HEADER = 12, AT_B = 16, AT_H = 24, AT_D = 32, AT_HS = 40, AT_WS = 48, AT_PH = 56,
  AT_PW = 64, AT_CS = 72, AT_STRATEGY = 80, AT_DTYPE = 84, AT_KSCALE = 88, AT_EPS = 92, AT_WHASH = 96, AT_F0 = 104,
  AT_STATE = 112, AT_LOOKBACK = 120
};

size_t cd_stream_image_size(const cd_stream_key *key) {
  size_t n;
  if (key->state_bytes > SIZE_MAX || key->lookback_bytes > SIZE_MAX ||
      !camdelta_size_add(&n, CD_STREAM_HEADER + CD_STREAM_TRAILER, (size_t)key->state_bytes) ||
      !camdelta_size_add(&n, n, (size_t)key->lookback_bytes))
    return 0;
  return n;
}

void cd_stream_schedule(uint64_t chunk_size, uint32_t strategy, uint64_t *first, uint64_t *rest) {
  *rest = chunk_size;
  *first = strategy == CAMDELTA_CHUNK_FIRST_FRAME ? 1 : strategy == CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE ? chunk_size + 1
                                                                                                        : chunk_size;
}

void cd_stream_image_header(const cd_stream_key *key, uint64_t f0, unsigned char *img) {
  memset(img, 0, CD_STREAM_HEADER);
  memcpy(img + AT_MAGIC, CD_STREAM_MAGIC, 8);
  put32(img + AT_VERSION, CD_STREAM_VERSION);
  put32(img + AT_HEADER, CD_STREAM_HEADER);
  const uint64_t dims[] = {key->B, key->H, key->D, key->Hs, key->Ws, key->ph, key->pw, key->chunk_size};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) put64(img + AT_B + 8 * i, dims[i]);
  put32(img + AT_STRATEGY, key->strategy);
  put32(img + AT_DTYPE, key->dtype);
  put32(img + AT_KSCALE, fbits(key->k_scale));
  put32(img + AT_EPS, fbits(key->norm_eps));
  put64(img + AT_WHASH, key->weights_hash);
  put64(img + AT_F0, f0);
  put64(img + AT_STATE, key->state_bytes);
  put64(img + AT_LOOKBACK, key->lookback_bytes);
}

void cd_stream_image_seal(unsigned char *img, size_t size) {
  put64(img + size - CD_STREAM_TRAILER, cd_fnv1a(CD_FNV_START, img, size - CD_STREAM_TRAILER));
}

/* The header's magic, version and header size (FORMAT); img holds CD_STREAM_HEADER bytes. */
static camdelta_status check_head(const char *op, const unsigned char *img) {
  if (memcmp(img + AT_MAGIC, CD_STREAM_MAGIC, 8) != 0)
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: not a stream image (no '%s' magic)", op, CD_STREAM_MAGIC);
  const uint32_t version = get32(img + AT_VERSION), header = get32(img + AT_HEADER);
  if (version != CD_STREAM_VERSION)
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: stream image format version %u; this library reads version %u", op,
                   version, CD_STREAM_VERSION);
  if (header != CD_STREAM_HEADER)
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: header of %u bytes, version %u has %u", op, header, version,
                   CD_STREAM_HEADER);
  return CAMDELTA_OK;
}

/* The configuration the header names against key's (INVALID_ARGUMENT naming the first field that differs). */
static camdelta_status check_config(const char *op, const cd_stream_key *key, const unsigned char *img) {
  static const char *const names[] = {"B", "H", "D", "Hs", "Ws", "ph", "pw", "chunk_size"};
  const uint64_t want[] = {key->B, key->H, key->D, key->Hs, key->Ws, key->ph, key->pw, key->chunk_size};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const uint64_t have = get64(img + AT_B + 8 * i);
    if (have != want[i])
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: the image is of a stream with %s=%llu, this stream has %llu",
                     op, names[i], (unsigned long long)have, (unsigned long long)want[i]);
  }
  const uint32_t strategy = get32(img + AT_STRATEGY), dtype = get32(img + AT_DTYPE);
  if (strategy != key->strategy)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: the image is of a stream with chunk strategy %s, this one %s",
                   op, camdelta_chunk_strategy_name((camdelta_chunk_strategy)strategy),
                   camdelta_chunk_strategy_name((camdelta_chunk_strategy)key->strategy));
  if (dtype != key->dtype)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: the image is of a stream with dtype %s, this one %s", op,
                   camdelta_dtype_name((camdelta_dtype)dtype), camdelta_dtype_name((camdelta_dtype)key->dtype));
  if (get32(img + AT_KSCALE) != fbits(key->k_scale) || get32(img + AT_EPS) != fbits(key->norm_eps))
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s: the image is of a stream with another k_scale or norm_eps",
                   op);
  if (get64(img + AT_WHASH) != key->weights_hash)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "%s: the image is of a stream with other weights (conv_weight, q_norm_weight, k_norm_weight)", op);
  return CAMDELTA_OK;
}

camdelta_status cd_stream_image_parse(const char *op, const cd_stream_key *key, const unsigned char *img, size_t size,
                                      uint64_t *f0, size_t *state_at, size_t *lookback_at) {
  if (!img || size < CD_STREAM_HEADER + CD_STREAM_TRAILER)
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: %zu bytes: too short for a stream image (header %u bytes)", op, size,
                   CD_STREAM_HEADER);
  camdelta_status st = check_head(op, img);
  if (st) return st;
  const uint64_t sb = get64(img + AT_STATE), lb = get64(img + AT_LOOKBACK);
  const uint64_t room = (uint64_t)(size - CD_STREAM_HEADER - CD_STREAM_TRAILER);
  if (sb > room || lb != room - sb)
    return cd_fail(CAMDELTA_ERROR_FORMAT,
                   "%s: the image claims %llu state and %llu look-back bytes, its size (%zu bytes) holds %llu", op,
                   (unsigned long long)sb, (unsigned long long)lb, size, (unsigned long long)room);
  if (get64(img + size - CD_STREAM_TRAILER) != cd_fnv1a(CD_FNV_START, img, size - CD_STREAM_TRAILER))
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: the image is damaged (checksum mismatch)", op);
  if ((st = check_config(op, key, img))) return st;
  if (sb != key->state_bytes || lb != key->lookback_bytes)
    return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: state and look-back of %llu and %llu bytes, this stream's are %llu and "
                   "%llu", op, (unsigned long long)sb, (unsigned long long)lb,
                   (unsigned long long)key->state_bytes, (unsigned long long)key->lookback_bytes);
  const uint64_t f = get64(img + AT_F0);
  uint64_t first, rest;
  cd_stream_schedule(key->chunk_size, key->strategy, &first, &rest);
  if (f > UINT32_MAX || (f != 0 && (f < first || rest == 0 || (f - first) % rest != 0)))
    return cd_fail(CAMDELTA_ERROR_FORMAT,
                   "%s: the image is at frame %llu, which the schedule (%s, chunk_size %llu) never reaches", op,
                   (unsigned long long)f, camdelta_chunk_strategy_name((camdelta_chunk_strategy)key->strategy),
                   (unsigned long long)key->chunk_size);
  *f0 = f;
  *state_at = CD_STREAM_HEADER;
  *lookback_at = CD_STREAM_HEADER + (size_t)sb;
  return CAMDELTA_OK;
}

/* Reads n bytes from fd into buf (IO on an error or a short file). */
static camdelta_status read_all(const char *op, const char *path, int fd, unsigned char *buf, size_t n) {
  for (size_t got = 0; got < n;) {
    const ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return cd_fail(CAMDELTA_ERROR_IO, "%s: reading '%s': %s", op, path, r < 0 ? strerror(errno) : "file shrank");
    got += (size_t)r;
  }
  return CAMDELTA_OK;
}

/* A file of another size than this stream's image: when its header is a stream image's of another configuration
 * (another dtype sizes the look-back differently, another grid everything), that field is named (INVALID_ARGUMENT);
 * otherwise FORMAT naming the sizes. */
static camdelta_status other_size(const char *op, const cd_stream_key *key, const char *path, int fd, long long have,
                                  size_t size) {
  unsigned char head[CD_STREAM_HEADER];
  if (key && have >= (long long)CD_STREAM_HEADER && !read_all(op, path, fd, head, sizeof head) &&
      !check_head(op, head)) {
    const camdelta_status st = check_config(op, key, head);
    if (st) return st;
  }
  return cd_fail(CAMDELTA_ERROR_FORMAT, "%s: '%s' has %lld bytes; an image of this stream has %zu", op, path, have,
                 size);
}

camdelta_status cd_stream_read_file(const char *op, const cd_stream_key *key, const char *path, unsigned char *buf,
                                    size_t size) {
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return cd_fail(CAMDELTA_ERROR_IO, "%s: cannot open '%s': %s", op, path, strerror(errno));
  struct stat sb;
  camdelta_status st = CAMDELTA_OK;
  if (fstat(fd, &sb) != 0)
    st = cd_fail(CAMDELTA_ERROR_IO, "%s: cannot stat '%s': %s", op, path, strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    st = cd_fail(CAMDELTA_ERROR_FORMAT, "%s: '%s' is not a regular file", op, path);
  else if (sb.st_size < 0 || (uint64_t)sb.st_size != (uint64_t)size)
    st = other_size(op, key, path, fd, (long long)sb.st_size, size);
  else
    st = read_all(op, path, fd, buf, size);
  close(fd);
  return st;
}
