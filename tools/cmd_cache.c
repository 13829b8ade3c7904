/* camdelta cache list|clear|warm|dir: the on-disk kernel program cache.
 *
 * The entry format is private to the library (src/runtime/cache.c); listing and clearing go through
 * camdelta_cache_list and camdelta_cache_clear, which touch only camdelta's own files (<key>.clbin and their
 * temporary files), so a cache folder pointed at a shared place never loses unrelated files, and which refuse
 * a folder that is not safe to use (see camdelta_cache_dir in camdelta.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_common.h"
#include "usage.h"

static int cache_folder(char *buf, size_t size) {
  camdelta_status st = camdelta_cache_dir(buf, size);
  if (st != CAMDELTA_OK) return cli_lib_error(st, "cache");
  return CLI_EXIT_OK;
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

/* 1 with the cache folder in dir; else 0 with the command's exit code in *rc, after saying that the cache is off
 * (`then` ends that line) or why the folder is unknown. */
static int folder_in_use(char *dir, size_t size, const char *then, int *rc) {
  if ((*rc = cache_folder(dir, size))) return 0;
  if (dir[0]) return 1;
  printf("cache: off (CAMDELTA_CACHE=0 or no home folder)%s\n", then);
  return 0;
}

static int cache_list(void) {
  char dir[4096];
  int rc;
  if (!folder_in_use(dir, sizeof dir, "", &rc)) return rc;
  camdelta_cache_entry *e = NULL;
  size_t n = 0;
  camdelta_status st = camdelta_cache_list(&e, &n);
  if (st != CAMDELTA_OK) return cli_lib_error(st, "cache list");
  char shown[4 * sizeof dir + 1];
  printf("cache folder: %s\n", cli_escape(dir, shown, sizeof shown));
  uint64_t total = 0;
  if (n) printf("%-70s %10s %6s  %-8s %s\n", "FILE", "SIZE", "AGE", "STATE", "DEVICE");
  for (size_t i = 0; i < n; i++) {
    char sz[32], age[32];
    const char *state = e[i].state == CAMDELTA_CACHE_ENTRY_OK        ? "ok"
                        : e[i].state == CAMDELTA_CACHE_ENTRY_CORRUPT ? "corrupt"
                                                                     : "partial";
    printf("%-70s %10s %6s  %-8s %s\n", e[i].file, size_str(e[i].bytes, sz, sizeof sz),
           age_str((time_t)e[i].mtime, age, sizeof age), state, e[i].device[0] ? e[i].device : "-");
    total += e[i].bytes;
  }
  char tot[32];
  printf("%zu %s, %s\n", n, n == 1 ? "entry" : "entries", size_str(total, tot, sizeof tot));
  camdelta_cache_list_free(e);
  return CLI_EXIT_OK;
}

static int cache_clear(void) {
  char dir[4096];
  int rc;
  if (!folder_in_use(dir, sizeof dir, "; nothing to clear", &rc)) return rc;
  size_t removed = 0;
  uint64_t bytes = 0;
  camdelta_status st = camdelta_cache_clear(&removed, &bytes);
  char sz[32], shown[4 * sizeof dir + 1];
  if (st == CAMDELTA_OK || removed)
    printf("removed %zu %s (%s) from %s\n", removed, removed == 1 ? "entry" : "entries",
           size_str(bytes, sz, sizeof sz), cli_escape(dir, shown, sizeof shown));
  if (st != CAMDELTA_OK) return cli_lib_error(st, "cache clear");
  return CLI_EXIT_OK;
}

static int cache_warm(cli_args *a) {
  const char *selector = NULL, *shape = NULL;
  size_t sh[4] = {0, 0, 0, 0};
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
      if (r < 0) return CLI_EXIT_USAGE;
      if (!cli_parse_sizes("--shape", shape, 4, sh, "B,H,D,S")) return CLI_EXIT_USAGE;
      const cli_shape one_frame = {.name = shape, .B = sh[0], .H = sh[1], .D = sh[2], .F = 1, .S = sh[3]};
      if (!cli_check_shape("cache warm", &one_frame)) return CLI_EXIT_USAGE;
      continue;
    }
    return cli_error(CLI_EXIT_USAGE, "cache warm: unknown option '%s' (see 'camdelta help cache')", a->argv[a->i]);
  }
  char dir[4096];
  int rc = cache_folder(dir, sizeof dir);
  if (rc) return rc;
  camdelta_context *ctx;
  if ((rc = cli_context(&ctx, selector))) return rc;
  if (shape) { /* a shape no call could run on this device is refused, not warmed: the smallest call holds q k v out */
    cli_budget b = {0, 0, 0, 0};
    size_t one_frame = 0;
    if (!camdelta_size_prod(&one_frame, 4, sh)) b.overflow = 1; /* B*H*D*S, checked by cli_check_shape */
    cli_budget_device(&b, 4, one_frame, 4);
    if ((rc = cli_budget_check(&b, ctx, "cache warm: this shape"))) {
      camdelta_context_destroy(ctx);
      return rc;
    }
  }
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
  char shown[4 * sizeof dir + 1];
  if (dir[0]) printf("cache folder: %s\n", cli_escape(dir, shown, sizeof shown));
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
