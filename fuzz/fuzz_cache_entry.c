#define _POSIX_C_SOURCE 200809L
/* libFuzzer target: the cache-entry reader. Every input is checked as an image (cd_cache_parse_entry, with and
 * without an expected key) and, through the real loader (cd_cache_load: open with O_NOFOLLOW|O_NONBLOCK, fstat,
 * size limits before allocating, the hash), as a file in a private cache folder. Inputs whose first byte is odd
 * are resealed first (their hash recomputed, as a writer would), so the fuzzer also explores entries that pass the
 * hash and must then be judged by their header alone. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/internal.h"

static char g_dir[256];
static const char g_key[65] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  snprintf(g_dir, sizeof g_dir, "/tmp/camdelta-fuzz-cache-%ld", (long)getpid());
  mkdir(g_dir, 0700);
  setenv("CAMDELTA_CACHE_DIR", g_dir, 1);
  unsetenv("CAMDELTA_CACHE");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char *img = malloc(size ? size : 1);
  if (!img) return 0;
  memcpy(img, data, size);
  if (size && (img[0] & 1)) cd_cache_entry_seal(img, size);
  size_t plen = 0;
  char dev[65];
  const int any = cd_cache_parse_entry(img, size, NULL, &plen, dev);
  if (any && (plen == 0 || plen + 184 != size || strlen(dev) > 64)) abort();
  const int keyed = cd_cache_parse_entry(img, size, g_key, &plen, NULL);
  if (keyed && !any) abort();
  char path[400];
  snprintf(path, sizeof path, "%s/%s.clbin", g_dir, g_key);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (size && fwrite(img, 1, size, f) != size) abort();
  fclose(f);
  size_t len = 0;
  unsigned char *payload = cd_cache_load(g_key, &len);
  if ((payload != NULL) != (keyed != 0)) abort(); /* the loader and the parser agree */
  if (payload && (len != size - 184 || memcmp(payload, img + 184, len) != 0)) abort();
  free(payload);
  unlink(path);
  free(img);
  return 0;
}
