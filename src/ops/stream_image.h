/* The saved image of a stream (src/ops/stream.c; docs/streaming.md gives the format): its configuration key, the
 * parser every restored image goes through (host only: the fuzz target fuzz/fuzz_stream_image.c runs it) and the
 * checked file reader. Not installed. */
#ifndef CAMDELTA_STREAM_IMAGE_H
#define CAMDELTA_STREAM_IMAGE_H
#include <stdint.h>

#include "runtime/internal.h"

#define CD_STREAM_MAGIC "CDSTREAM"
#define CD_STREAM_VERSION 1u
#define CD_STREAM_HEADER 128u /* bytes before the state */
#define CD_STREAM_TRAILER 8u  /* the checksum after the look-back */

/** What an image must match: a stream's configuration. */
typedef struct cd_stream_key {
  uint64_t B, H, D, Hs, Ws, ph, pw, chunk_size;
  uint32_t strategy, dtype;
  float k_scale, norm_eps;
  uint64_t weights_hash;
  uint64_t state_bytes;    /* B*H*D*D*4 */
  uint64_t lookback_bytes; /* B*3*S*C*(bytes per element of dtype) */
} cd_stream_key;

/** FNV-1a (64 bits) of n bytes, continuing from h (start: CD_FNV_START). */
#define CD_FNV_START 0xcbf29ce484222325ull
uint64_t cd_fnv1a(uint64_t h, const void *p, size_t n);

/** The image's size for key (0 when it overflows). */
size_t cd_stream_image_size(const cd_stream_key *key);

/** The frames of the first block of the schedule and of every later one. */
void cd_stream_schedule(uint64_t chunk_size, uint32_t strategy, uint64_t *first, uint64_t *rest);

/** Writes the header, copies nothing else: the caller fills the state and look-back at img + CD_STREAM_HEADER and
 *  + state_bytes, then calls cd_stream_image_seal. img holds cd_stream_image_size(key) bytes. */
void cd_stream_image_header(const cd_stream_key *key, uint64_t f0, unsigned char *img);
void cd_stream_image_seal(unsigned char *img, size_t size);

/** Checks an image of `size` bytes against key: the format (magic, version, header size, the sizes it claims and
 *  its size, the checksum; FORMAT), then the configuration (INVALID_ARGUMENT naming the field), then f0 (a frame
 *  count the schedule reaches, below 2^32; FORMAT). On success *f0 and the offsets of the state and look-back. `op`
 *  begins the messages. Reads nothing past img[size). */
camdelta_status cd_stream_image_parse(const char *op, const cd_stream_key *key, const unsigned char *img, size_t size,
                                      uint64_t *f0, size_t *state_at, size_t *lookback_at);

/** Reads the file at path, which must be a regular file of exactly `size` bytes (checked before reading), into
 *  buf. IO (cannot open or read), FORMAT (not a regular file, another size), INVALID_ARGUMENT (another size, and
 *  the file's header is a stream image's of another configuration than key's, not NULL: the field named). */
camdelta_status cd_stream_read_file(const char *op, const cd_stream_key *key, const char *path, unsigned char *buf,
                                    size_t size);
#endif
