/* libFuzzer target: the .npy parser, on the in-memory image (camdelta_npy_parse) and through a file
 * (camdelta_npy_read: the preamble/header reads bounded by the file size, the exact-length checks). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "camdelta_npy.h"

static int g_fd = -1;
static char g_path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  camdelta_npy a;
  if (camdelta_npy_parse(data, size, &a) == CAMDELTA_OK) {
    /* a parsed image holds exactly its shape's data */
    size_t es = a.type == CAMDELTA_NPY_F2 ? 2 : a.type == CAMDELTA_NPY_F4 ? 4 : 8;
    if (a.count * es > size) abort();
    camdelta_npy_free(&a);
  }
  if (g_fd < 0) {
    g_fd = memfd_create("fuzz_npy", 0);
    if (g_fd < 0) abort();
    snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
  }
  if (ftruncate(g_fd, 0) != 0 || pwrite(g_fd, data, size, 0) != (ssize_t)size) abort();
  camdelta_npy b;
  const camdelta_status st = camdelta_npy_read(g_path, &b);
  if (st == CAMDELTA_OK) camdelta_npy_free(&b);
  /* the file and the image are judged alike */
  if ((st == CAMDELTA_OK) != (camdelta_npy_parse(data, size, &a) == CAMDELTA_OK)) abort();
  if (a.data) camdelta_npy_free(&a);
  return 0;
}
