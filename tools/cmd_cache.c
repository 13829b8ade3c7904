/* camdelta cache list|clear|warm|dir: the on-disk kernel program cache.
 *
 * Entries are <folder>/<64 hex key>.clbin in the format of src/cache.c:
 *   0   16  magic "CAMDELTA-CLBIN1\0"
 *   16  64  key (hex), equal to the file name's key
 *   80  64  device name (NUL-padded)
 *   144  8  payload length (little-endian)
 *   152 32  BLAKE2b-256 of the payload
 *   184  .  payload
 * Writers leave <key>.clbin.tmp.* files only when they die mid-write.
 * `clear` removes exactly these two kinds of files and nothing else, so a
 * cache folder pointed at a shared place never loses unrelated files. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli_common.h"

#define CACHE_MAGIC "CAMDELTA-CLBIN1"
#define CACHE_HDR 184

void usage_cache(void) {
  printf("usage: camdelta cache list|clear|warm|dir [options]\n"
         "\n"
         "The folder where compiled kernel programs are kept between runs: CAMDELTA_CACHE_DIR,\n"
         "else $XDG_CACHE_HOME/camdelta, else ~/.cache/camdelta; CAMDELTA_CACHE=0 turns it off.\n"
         "\n"
         "  list                  every entry: file, size, age, device it was built for, state\n"
         "                        (ok: header consistent; corrupt: it will be discarded and\n"
         "                        rebuilt on next use; partial: a write that never finished)\n"
         "  clear                 remove every entry (only camdelta's own *.clbin files)\n"
         "  warm [--device SEL] [--shape B,H,D,S]\n"
         "                        build the kernels ahead of time (for deployment images):\n"
         "                        without --shape those that depend on the head dim only\n"
         "                        (prep, backward) for D = 8..128; with --shape everything\n"
         "                        a call of that shape uses, the scan forward included\n"
         "  dir                   print the folder (empty line when caching is off)\n");
}

typedef enum entry_kind { ENTRY_OK, ENTRY_CORRUPT, ENTRY_PARTIAL } entry_kind;

typedef struct cache_entry {
  char name[256];
  char device[65];
  uint64_t size;
  time_t mtime;
  entry_kind kind;
} cache_entry;

static int is_hex_key(const char *s) {
  for (int i = 0; i < 64; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

/* 1: "<key>.clbin", 2: "<key>.clbin.tmp.*", 0: not ours. */
static int classify_name(const char *name) {
  size_t n = strlen(name);
  if (n < 70 || !is_hex_key(name) || strncmp(name + 64, ".clbin", 6) != 0) return 0;
  if (n == 70) return 1;
  if (strncmp(name + 70, ".tmp.", 5) == 0) return 2;
  return 0;
}

static int cache_folder(char *buf, size_t size) {
  camdelta_status st = camdelta_cache_dir(buf, size);
  if (st != CAMDELTA_OK) return cli_lib_error(st, "cache");
  return CLI_EXIT_OK;
}

/* Read the header of an entry: device name and whether it is consistent
 * (magic, key = file name, payload length = file size - header). The
 * content hash is checked by the library when it loads the entry. */
static void inspect(const char *path, cache_entry *e) {
  e->kind = ENTRY_CORRUPT;
  e->device[0] = '\0';
  FILE *f = fopen(path, "rb");
  if (!f) return;
  unsigned char h[CACHE_HDR];
  size_t got = fread(h, 1, sizeof h, f);
  fclose(f);
  if (got != sizeof h || memcmp(h, CACHE_MAGIC, sizeof CACHE_MAGIC) != 0 || memcmp(h + 16, e->name, 64) != 0) return;
  memcpy(e->device, h + 80, 64);
  e->device[64] = '\0';
  for (char *p = e->device; *p; p++)
    if ((unsigned char)*p < 0x20) *p = '?';
  uint64_t plen = 0;
  for (int i = 7; i >= 0; i--) plen = (plen << 8) | h[144 + i];
  if (plen > 0 && plen == e->size - CACHE_HDR) e->kind = ENTRY_OK;
}

/* Entries of the folder, newest first. *n = 0 when the folder does not exist. */
static int scan_folder(const char *dir, cache_entry **out, size_t *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) return CLI_EXIT_OK;
    return cli_error(CLI_EXIT_FAILURE, "%s: cannot open the cache folder: %s", dir, strerror(errno));
  }
  size_t cap = 0;
  struct dirent *de;
  int rc = CLI_EXIT_OK;
  while ((de = readdir(d)) != NULL) {
    int kind = classify_name(de->d_name);
    if (!kind || strlen(de->d_name) >= sizeof(*out)->name) continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
    if (*n == cap) {
      size_t ncap = cap ? 2 * cap : 32;
      cache_entry *grown = realloc(*out, ncap * sizeof *grown);
      if (!grown) {
        rc = cli_error(CLI_EXIT_FAILURE, "out of host memory listing %s", dir);
        break;
      }
      *out = grown;
      cap = ncap;
    }
    cache_entry *e = &(*out)[(*n)++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", de->d_name);
    e->size = (uint64_t)sb.st_size;
    e->mtime = sb.st_mtime;
    if (kind == 2) e->kind = ENTRY_PARTIAL;
    else inspect(path, e);
  }
  closedir(d);
  return rc;
}

static int newest_first(const void *a, const void *b) {
  const cache_entry *x = a, *y = b;
  if (x->mtime != y->mtime) return x->mtime < y->mtime ? 1 : -1;
  return strcmp(x->name, y->name);
}

static const char *size_str(uint64_t b, char *buf, size_t size) {
  if (b < 1024) snprintf(buf, size, "%llu B", (unsigned long long)b);
  else if (b < 1024 * 1024) snprintf(buf, size, "%.1f KiB", (double)b / 1024);
  else snprintf(buf, size, "%.1f MiB", (double)b / (1024 * 1024));
  return buf;
}

static const char *age_str(time_t t, char *buf, size_t size) {
  double s = difftime(time(NULL), t);
  if (s < 0) s = 0;
  if (s < 120) snprintf(buf, size, "%.0fs", s);
  else if (s < 7200) snprintf(buf, size, "%.0fm", s / 60);
  else if (s < 172800) snprintf(buf, size, "%.0fh", s / 3600);
  else snprintf(buf, size, "%.0fd", s / 86400);
  return buf;
}

static int cache_list(void) {
  char dir[4096];
  int rc = cache_folder(dir, sizeof dir);
  if (rc) return rc;
  if (!dir[0]) {
    printf("cache: off (CAMDELTA_CACHE=0 or no home folder)\n");
    return CLI_EXIT_OK;
  }
  cache_entry *e;
  size_t n;
  if ((rc = scan_folder(dir, &e, &n))) {
    free(e);
    return rc;
  }
  if (n > 1) qsort(e, n, sizeof *e, newest_first);
  printf("cache folder: %s\n", dir);
  uint64_t total = 0;
  if (n) printf("%-70s %10s %6s  %-8s %s\n", "FILE", "SIZE", "AGE", "STATE", "DEVICE");
  for (size_t i = 0; i < n; i++) {
    char sz[32], age[32];
    const char *state = e[i].kind == ENTRY_OK ? "ok" : e[i].kind == ENTRY_CORRUPT ? "corrupt" : "partial";
    printf("%-70s %10s %6s  %-8s %s\n", e[i].name, size_str(e[i].size, sz, sizeof sz),
           age_str(e[i].mtime, age, sizeof age), state, e[i].device[0] ? e[i].device : "-");
    total += e[i].size;
  }
  char tot[32];
  printf("%zu %s, %s\n", n, n == 1 ? "entry" : "entries", size_str(total, tot, sizeof tot));
  free(e);
  return CLI_EXIT_OK;
}

static int cache_clear(void) {
  char dir[4096];
  int rc = cache_folder(dir, sizeof dir);
  if (rc) return rc;
  if (!dir[0]) {
    printf("cache: off (CAMDELTA_CACHE=0 or no home folder); nothing to clear\n");
    return CLI_EXIT_OK;
  }
  cache_entry *e;
  size_t n;
  if ((rc = scan_folder(dir, &e, &n))) {
    free(e);
    return rc;
  }
  size_t removed = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, e[i].name);
    if (unlink(path) == 0) {
      removed++;
      bytes += e[i].size;
    } else if (errno != ENOENT) {
      rc = cli_error(CLI_EXIT_FAILURE, "%s: cannot remove: %s", path, strerror(errno));
    }
  }
  char sz[32];
  printf("removed %zu %s (%s) from %s\n", removed, removed == 1 ? "entry" : "entries", size_str(bytes, sz, sizeof sz),
         dir);
  free(e);
  return rc;
}

static int cache_warm(cli_args *a) {
  const char *selector = NULL, *shape = NULL;
  unsigned long sh[4] = {0, 0, 0, 0};
  while (a->i < a->argc) {
    int r;
    if (cli_flag(a, "--help") || cli_flag(a, "-h")) {
      usage_cache();
      return CLI_EXIT_OK;
    }
    if ((r = cli_value(a, "--device", &selector))) {
      if (r < 0) return CLI_EXIT_USAGE;
      continue;
    }
    if ((r = cli_value(a, "--shape", &shape))) {
      char tail;
      if (r < 0) return CLI_EXIT_USAGE;
      if (sscanf(shape, "%lu,%lu,%lu,%lu%c", &sh[0], &sh[1], &sh[2], &sh[3], &tail) != 4)
        return cli_error(CLI_EXIT_USAGE, "cache warm: --shape wants B,H,D,S (got '%s')", shape);
      continue;
    }
    return cli_error(CLI_EXIT_USAGE, "cache warm: unknown option '%s' (see 'camdelta help cache')", a->argv[a->i]);
  }
  char dir[4096];
  int rc = cache_folder(dir, sizeof dir);
  if (rc) return rc;
  camdelta_context *ctx;
  if ((rc = cli_context(&ctx, selector))) return rc;
  camdelta_device_info info;
  const char *dev = camdelta_context_info(ctx, &info) == CAMDELTA_OK ? info.device_name : "?";
  camdelta_status st = shape ? camdelta_warm_shape(ctx, sh[0], sh[1], sh[2], sh[3]) : camdelta_warm(ctx);
  if (st != CAMDELTA_OK) {
    rc = cli_lib_error(st, shape ? "camdelta_warm_shape" : "camdelta_warm");
    camdelta_context_destroy(ctx);
    return rc;
  }
  camdelta_build_stats bs;
  memset(&bs, 0, sizeof bs);
  camdelta_context_build_stats(ctx, &bs);
  printf("warmed %u programs for %s: %u from the cache, %u compiled\n", bs.programs, dev, bs.from_disk, bs.compiled);
  if (dir[0]) printf("cache folder: %s\n", dir);
  else printf("note: caching is off (CAMDELTA_CACHE=0), so nothing was kept for later runs\n");
  camdelta_context_destroy(ctx);
  return CLI_EXIT_OK;
}

int cmd_cache(int argc, char **argv) {
  cli_args a = {argc, argv, 0};
  if (argc < 1) return cli_error(CLI_EXIT_USAGE, "cache: missing the action: list, clear, warm or dir");
  const char *action = argv[0];
  a.i = 1;
  if (strcmp(action, "--help") == 0 || strcmp(action, "-h") == 0 || strcmp(action, "help") == 0) {
    usage_cache();
    return CLI_EXIT_OK;
  }
  if (strcmp(action, "warm") == 0) return cache_warm(&a);
  if (strcmp(action, "list") != 0 && strcmp(action, "clear") != 0 && strcmp(action, "dir") != 0)
    return cli_error(CLI_EXIT_USAGE, "cache: unknown action '%s' (expected list, clear, warm or dir)", action);
  if (argc > 1) return cli_error(CLI_EXIT_USAGE, "cache %s: unexpected argument '%s'", action, argv[1]);
  if (strcmp(action, "list") == 0) return cache_list();
  if (strcmp(action, "clear") == 0) return cache_clear();
  char dir[4096];
  int rc = cache_folder(dir, sizeof dir);
  if (rc) return rc;
  printf("%s\n", dir);
  return CLI_EXIT_OK;
}
