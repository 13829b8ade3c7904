/* What the file-reading fuzz targets share: a writable copy of the input, and the input as a file. */
#ifndef CD_FUZZ_INPUT_H
#define CD_FUZZ_INPUT_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The input in a block of its own (malloc'd, at least one byte, so an empty input has an address too); NULL when
 * out of memory. */
static inline unsigned char *fuzz_copy(const uint8_t *data, size_t size) {
  unsigned char *img = malloc(size ? size : 1);
  if (img) memcpy(img, data, size);
  return img;
}

/* b[0 .. size-1] written to `path` (created or truncated); aborts when it cannot be written. */
static inline void fuzz_write_file(const char *path, const unsigned char *b, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (size && fwrite(b, 1, size, f) != size) abort();
  fclose(f);
}
#endif
