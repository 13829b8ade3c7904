#define _POSIX_C_SOURCE 200809L
/* libFuzzer target: the stream image parser (cd_stream_image_parse, every image camdelta_stream_restore and
 * camdelta_stream_restore_file are given goes through it first) and the checked file reader in front of it
 * (cd_stream_read_file: a regular file of exactly the image's size). The key is a small stream's (B 1, H 2, D 8,
 * a 2 x 2 grid, first_chunk_plus_one with chunk_size 3), so that images of the right size are reachable. Inputs
 * whose first state byte is odd are resealed (their checksum recomputed, as a writer would), so that the fuzzer also
 * explores images that pass the checksum and must be judged by their fields. An accepted image must be
 * self-consistent: its f0 a block boundary of the schedule, its parts inside it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "ops/stream_image.h"

static const cd_stream_key KEY = {.B = 1, .H = 2, .D = 8, .Hs = 2, .Ws = 2, .ph = 1, .pw = 1, .chunk_size = 3,
                                  .strategy = CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE, .dtype = CAMDELTA_F32,
                                  .k_scale = 0.125f, .norm_eps = 1e-6f, .weights_hash = 0x1234567890abcdefull,
                                  .state_bytes = 1 * 2 * 8 * 8 * 4, .lookback_bytes = 1 * 3 * 4 * 16 * 4};
static char g_path[256];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  snprintf(g_path, sizeof g_path, "/tmp/camdelta-fuzz-stream-%ld.cds", (long)getpid());
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char *img = fuzz_copy(data, size);
  if (!img) return 0;
  if (size > CD_STREAM_HEADER + CD_STREAM_TRAILER && (img[CD_STREAM_HEADER] & 1)) cd_stream_image_seal(img, size);
  uint64_t f0 = 0;
  size_t state_at = 0, lookback_at = 0;
  const camdelta_status st = cd_stream_image_parse("fuzz", &KEY, img, size, &f0, &state_at, &lookback_at);
  const size_t want = cd_stream_image_size(&KEY);
  if (!st) {
    if (size != want || state_at != CD_STREAM_HEADER || lookback_at != state_at + KEY.state_bytes) abort();
    if (f0 != 0 && (f0 < 4 || (f0 - 4) % 3 != 0)) abort();
  }
  /* the file reader: the same bytes from a file, refused unless exactly the image's size */
  fuzz_write_file(g_path, img, size);
  unsigned char *buf = malloc(want);
  if (!buf) abort();
  const camdelta_status rf = cd_stream_read_file("fuzz", &KEY, g_path, buf, want);
  if ((rf == CAMDELTA_OK) != (size == want)) abort();
  if (!rf && memcmp(buf, img, want) != 0) abort();
  unlink(g_path);
  free(buf);
  free(img);
  return 0;
}
