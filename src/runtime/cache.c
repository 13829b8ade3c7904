/* The on-disk program cache (SPEC section 6).
 *
 * One file per program: <folder>/<key>.clbin where key = BLAKE2b-256 (hex) of
 * everything that determines the binary. File layout (little-endian):
 *   0   16  magic "CAMDELTA-CLBIN1\0"
 *   16  64  key (hex), must equal the file name's key
 *   80  64  device name (NUL-padded; informational, for `camdelta cache list`)
 *   144  8  payload length
 *   152 32  BLAKE2b-256 of the payload
 *   184  .  payload (the program binary)
 * Writes go to a unique temporary file in the same folder, are flushed with
 * fsync, then renamed over the entry, so readers never see a partial file.
 * Anything that does not verify is deleted and rebuilt by the caller. */
#include <blake2.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define CD_MAGIC "CAMDELTA-CLBIN1"
#define CD_HDR 184

static int mkdir_p(const char *path) {
  char tmp[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof tmp) return 0;
  memcpy(tmp, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (tmp[i] == '/' || tmp[i] == '\0') {
      char c = tmp[i];
      tmp[i] = '\0';
      if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return 0;
      tmp[i] = c;
    }
  }
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int cd_cache_folder(char *buf, size_t size) {
  const char *off = getenv("CAMDELTA_CACHE");
  if (off && strcmp(off, "0") == 0) return 0;
  const char *dir = getenv("CAMDELTA_CACHE_DIR");
  int w;
  if (dir && *dir) {
    w = snprintf(buf, size, "%s", dir);
  } else {
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (xdg && *xdg) w = snprintf(buf, size, "%s/camdelta", xdg);
    else if (home && *home) w = snprintf(buf, size, "%s/.cache/camdelta", home);
    else return 0;
  }
  return w > 0 && (size_t)w < size;
}

static void hex(const unsigned char *in, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[2 * n] = '\0';
}

static void feed(blake2b_state *s, const char *field) {
  uint64_t n = strlen(field);
  blake2b_update(s, (const uint8_t *)&n, sizeof n); /* length-prefixed: fields cannot run together */
  blake2b_update(s, (const uint8_t *)field, n);
}

void cd_cache_key(camdelta_context *ctx, const char *options, const char *src, size_t src_len, char key_hex[65]) {
  blake2b_state s;
  unsigned char out[32];
  blake2b_init(&s, sizeof out);
  feed(&s, "camdelta-program-v1");
  feed(&s, ctx->info.platform_name);
  feed(&s, ctx->info.platform_version);
  feed(&s, ctx->info.device_name);
  feed(&s, ctx->info.device_vendor);
  feed(&s, ctx->info.device_version);
  feed(&s, ctx->info.driver_version);
  feed(&s, CAMDELTA_VERSION_STRING);
  feed(&s, options);
  uint64_t n = src_len;
  blake2b_update(&s, (const uint8_t *)&n, sizeof n);
  blake2b_update(&s, (const uint8_t *)src, src_len);
  blake2b_final(&s, out, sizeof out);
  hex(out, sizeof out, key_hex);
}

static int entry_path(const char *key_hex, char *path, size_t size) {
  char dir[4096];
  if (!cd_cache_folder(dir, sizeof dir)) return 0;
  int w = snprintf(path, size, "%s/%s.clbin", dir, key_hex);
  return w > 0 && (size_t)w < size;
}

unsigned char *cd_cache_load(const char *key_hex, size_t *len) {
  char path[4200];
  if (!entry_path(key_hex, path, sizeof path)) return NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char hdr[CD_HDR];
  unsigned char *payload = NULL;
  int ok = fread(hdr, 1, CD_HDR, f) == CD_HDR && memcmp(hdr, CD_MAGIC, sizeof CD_MAGIC) == 0 &&
           memcmp(hdr + 16, key_hex, 64) == 0;
  uint64_t plen = 0;
  if (ok) {
    for (int i = 7; i >= 0; i--) plen = (plen << 8) | hdr[144 + i];
    ok = plen > 0 && plen < ((uint64_t)1 << 32);
  }
  if (ok) {
    payload = malloc((size_t)plen + 1);
    ok = payload && fread(payload, 1, (size_t)plen, f) == plen && fgetc(f) == EOF;
  }
  if (ok) {
    unsigned char digest[32];
    blake2b(digest, payload, NULL, sizeof digest, (size_t)plen, 0);
    ok = memcmp(digest, hdr + 152, 32) == 0;
  }
  fclose(f);
  if (!ok) {
    free(payload);
    unlink(path); /* corrupt, truncated or foreign: never loaded, rebuilt by the caller */
    return NULL;
  }
  *len = (size_t)plen;
  return payload;
}

void cd_cache_store(const char *key_hex, const unsigned char *bin, size_t len, const char *device_name) {
  char dir[4096], path[4200], tmp[4300];
  if (!cd_cache_folder(dir, sizeof dir) || !mkdir_p(dir)) return;
  if (!entry_path(key_hex, path, sizeof path)) return;
  static _Thread_local unsigned counter;
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lx.%u", path, (long)getpid(), (unsigned long)time(NULL), counter++);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return;
  unsigned char hdr[CD_HDR];
  memset(hdr, 0, sizeof hdr);
  memcpy(hdr, CD_MAGIC, sizeof CD_MAGIC);
  memcpy(hdr + 16, key_hex, 64);
  strncpy((char *)hdr + 80, device_name ? device_name : "", 63);
  uint64_t plen = len;
  for (int i = 0; i < 8; i++) hdr[144 + i] = (unsigned char)(plen >> (8 * i));
  blake2b(hdr + 152, bin, NULL, 32, len, 0);
  int ok = 1;
  const unsigned char *parts[2] = {hdr, bin};
  size_t sizes[2] = {sizeof hdr, len};
  for (int p = 0; p < 2 && ok; p++) {
    size_t done = 0;
    while (done < sizes[p]) {
      ssize_t w = write(fd, parts[p] + done, sizes[p] - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ok = 0;
        break;
      }
      done += (size_t)w;
    }
  }
  if (ok && fsync(fd) != 0) ok = 0;
  if (close(fd) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}
