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
  CAMDELTA_NPY_I8 = 3, /* int64, for index arrays such as chunk_index */
  CAMDELTA_NPY_U2 = 4  /* uint16: bfloat16 bits (NumPy has no bfloat16), for 16-bit activations */
} camdelta_npy_type;
typedef struct camdelta_npy {
  camdelta_npy_type type; /* type in the file                         */
  int ndim;
  size_t shape[CAMDELTA_NPY_MAX_DIMS];
  size_t count;           /* product of shape                         */
  void *data;             /* count elements of `type`, little-endian  */
} camdelta_npy;
/** Read a little-endian C-order .npy of <f4, <f2, <f8, <i8 or <u2: a regular file
 *  (a FIFO, device or folder is refused without blocking) whose size is
 *  exactly the header plus the data its shape needs. Returns CAMDELTA_OK and
 *  *out (free with camdelta_npy_free); INVALID_ARGUMENT (NULL argument), IO
 *  (cannot open or read; not a regular file), FORMAT (malformed header,
 *  unsupported dtype or layout, short or long data; the message names the file
 *  and shows the header's bytes with non-printable ones escaped) or
 *  OUT_OF_MEMORY. *out is zeroed on failure. */
CAMDELTA_API camdelta_status camdelta_npy_read(const char *path, camdelta_npy *out);
/** Parse an in-memory .npy image of exactly `size` bytes (same rules and returns). */
CAMDELTA_API camdelta_status camdelta_npy_parse(const void *bytes, size_t size, camdelta_npy *out);
/** Write `data` as a .npy of `type` and `shape` at `path`, atomically: into a
 *  new temporary file beside it (O_CREAT | O_EXCL | O_NOFOLLOW), fsynced, then
 *  renamed over `path` (a symbolic link at `path` is replaced, never followed).
 *  On failure `path` is untouched and no temporary file remains.
 *  Returns CAMDELTA_OK; INVALID_ARGUMENT (NULL argument, bad type or ndim),
 *  OVERFLOW or IO. */
CAMDELTA_API camdelta_status camdelta_npy_write(const char *path, camdelta_npy_type type, int ndim,
                                                const size_t *shape, const void *data);
/** The first half of an atomic write, for writing several files all or nothing: writes and fsyncs the new
 *  temporary file beside `path` (a hidden ".NAME.tmp.*" in the same folder) and puts its name in tmp_path;
 *  the caller renames it over `path` (rename(2)) once every file of the set is written, or unlinks it.
 *  Fails (IO) when a folder is at `path`. Same returns as camdelta_npy_write; tmp_path is "" on failure
 *  (nothing left behind). */
CAMDELTA_API camdelta_status camdelta_npy_write_temp(const char *path, camdelta_npy_type type, int ndim,
                                                     const size_t *shape, const void *data, char *tmp_path,
                                                     size_t tmp_size);
/** Write `data` as a .npy of `type` and `shape` to the open file `fd` at its current position, then fsync it (for
 *  callers that create and name their files themselves, e.g. under a lock). `name` names the file in messages
 *  (escaped). Returns CAMDELTA_OK; INVALID_ARGUMENT, OVERFLOW or IO (the file may then hold a partial image). */
CAMDELTA_API camdelta_status camdelta_npy_write_fd(int fd, const char *name, camdelta_npy_type type, int ndim,
                                                   const size_t *shape, const void *data);
/** Frees the data and zeroes *npy (NULL is a no-op). */
CAMDELTA_API void camdelta_npy_free(camdelta_npy *npy);
/** Read a 1-D little-endian int64 (<i8) .npy, e.g. packed-clip offsets: *data (malloc'd, free with free())
 *  gets *count values. Any other dtype or rank is a CAMDELTA_ERROR_FORMAT naming the file. */
CAMDELTA_API camdelta_status camdelta_npy_read_i64(const char *path, int64_t **data, size_t *count);

#ifdef __cplusplus
}
#endif
#endif /* CAMDELTA_NPY_H */
