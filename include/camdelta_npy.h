/*
 * camdelta — NumPy .npy reading and writing (little-endian, C order; <f4, <f2, <f8, and <i8 for index arrays).
 * Not part of the stable core API in camdelta.h; includes it.
 */
#ifndef CAMDELTA_NPY_H
#define CAMDELTA_NPY_H

#include "camdelta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ .npy I/O */
#define CAMDELTA_NPY_MAX_DIMS 8
typedef enum camdelta_npy_type {
  CAMDELTA_NPY_F4 = 0,
  CAMDELTA_NPY_F2 = 1,
  CAMDELTA_NPY_F8 = 2,
  CAMDELTA_NPY_I8 = 3 /* int64, for index arrays such as chunk_index */
} camdelta_npy_type;
typedef struct camdelta_npy {
  camdelta_npy_type type; /* type in the file                         */
  int ndim;
  size_t shape[CAMDELTA_NPY_MAX_DIMS];
  size_t count;           /* product of shape                         */
  void *data;             /* count elements of `type`, little-endian  */
} camdelta_npy;
/** Read a little-endian C-order .npy of <f4, <f2, <f8 or <i8. */
CAMDELTA_API camdelta_status camdelta_npy_read(const char *path, camdelta_npy *out);
/** Parse an in-memory .npy image (same rules). */
CAMDELTA_API camdelta_status camdelta_npy_parse(const void *bytes, size_t size, camdelta_npy *out);
CAMDELTA_API camdelta_status camdelta_npy_write(const char *path, camdelta_npy_type type, int ndim,
                                                const size_t *shape, const void *data);
CAMDELTA_API void camdelta_npy_free(camdelta_npy *npy);

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_NPY_H */
