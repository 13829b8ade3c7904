/* Kernel sources: the copies embedded at build time, or CAMDELTA_KERNEL_DIR. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

static camdelta_status read_file(const char *path, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return cd_fail(CAMDELTA_ERROR_IO, "cannot open kernel source '%s' (CAMDELTA_KERNEL_DIR)", path);
  char *buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 65536;
      char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "out of host memory reading '%s'", path);
      }
      buf = nb;
    }
    size_t r = fread(buf + n, 1, 4096, f);
    n += r;
    if (r < 4096) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return cd_fail(CAMDELTA_ERROR_IO, "error reading kernel source '%s'", path);
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return CAMDELTA_OK;
}

camdelta_status cd_kernel_source(const char *name, const char **text, size_t *len, char **owned) {
  *owned = NULL;
  const char *dir = getenv("CAMDELTA_KERNEL_DIR");
  if (dir && *dir) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
      return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "CAMDELTA_KERNEL_DIR is too long");
    camdelta_status st = read_file(path, owned, len);
    if (st) return st;
    *text = *owned;
    return CAMDELTA_OK;
  }
  for (size_t i = 0; i < cd_embedded_source_count; i++) {
    if (strcmp(cd_embedded_sources[i].name, name) == 0) {
      *text = cd_embedded_sources[i].text;
      *len = cd_embedded_sources[i].len;
      return CAMDELTA_OK;
    }
  }
  return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "no kernel source named '%s' is embedded in this build", name);
}
