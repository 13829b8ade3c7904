/* docs/tuning.md from the option registry: `camdelta_tuning_md` writes it on stdout, `-o FILE` into FILE, and
 * `--check FILE` fails (exit 1) when FILE is not what it would write. It checks the table first (exit 2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options/options.h"

/* The whole of a stream from its start. */
static char *slurp(FILE *f, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      char *more = realloc(buf, cap *= 2);
      if (!more) free(buf);
      buf = more;
    }
  }
  *len = n;
  return buf;
}

int main(int argc, char **argv) {
  char err[512];
  if (cd_opt_check_table(err, sizeof err)) {
    fprintf(stderr, "camdelta_tuning_md: the option table is inconsistent: %s\n", err);
    return 2;
  }
  if (argc == 1) {
    cd_opt_markdown(stdout);
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "-o") == 0) {
    FILE *out = fopen(argv[2], "w");
    if (!out) {
      perror(argv[2]);
      return 2;
    }
    cd_opt_markdown(out);
    return fclose(out) == 0 ? 0 : 2;
  }
  if (argc == 3 && strcmp(argv[1], "--check") == 0) {
    FILE *want = tmpfile(), *have = fopen(argv[2], "rb");
    if (!want || !have) {
      perror(!want ? "tmpfile" : argv[2]);
      return 2;
    }
    cd_opt_markdown(want);
    rewind(want);
    size_t nw = 0, nh = 0;
    char *w = slurp(want, &nw), *h = slurp(have, &nh);
    const int same = w && h && nw == nh && memcmp(w, h, nw) == 0;
    if (!same)
      fprintf(stderr, "%s is stale: regenerate it with `cmake --build BUILD --target tuning-doc` and commit it\n",
              argv[2]);
    free(w), free(h);
    fclose(want), fclose(have);
    return same ? 0 : 1;
  }
  fprintf(stderr, "usage: camdelta_tuning_md [-o FILE | --check FILE]\n");
  return 2;
}
