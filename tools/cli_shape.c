/* Sizes on the command line: the strict parser, the shape limits and the budget (see cli_shape.h). */
#include "cli_shape.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "camdelta_helpers.h"
#include "cli_error.h"

/* digits only, at least one, value in [0, SIZE_MAX]; *end past the digits */
static int parse_digits(const char *text, const char **end, size_t *out) {
  size_t v = 0;
  const char *p = text;
  if (*p < '0' || *p > '9') return 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    const size_t digit = (size_t)(*p - '0');
    if (v > (SIZE_MAX - digit) / 10) return 0;
    v = v * 10 + digit;
  }
  *end = p;
  *out = v;
  return 1;
}

int cli_parse_size(const char *opt, const char *text, size_t *out) {
  const char *end;
  size_t v;
  char shown[256];
  if (!parse_digits(text, &end, &v) || *end != '\0' || v == 0) {
    cli_error(CLI_EXIT_USAGE, "option %s: '%s' is not a positive integer that fits in %zu bits", opt,
              cli_escape(text, shown, sizeof shown), sizeof(size_t) * 8);
    return 0;
  }
  *out = v;
  return 1;
}

int cli_parse_count(const char *opt, const char *text, size_t lo, size_t hi, size_t *out) {
  const char *end;
  size_t v;
  char shown[256];
  if (!parse_digits(text, &end, &v) || *end != '\0' || v < lo || v > hi) {
    cli_error(CLI_EXIT_USAGE, "option %s: '%s' is not an integer in [%zu, %zu]", opt,
              cli_escape(text, shown, sizeof shown), lo, hi);
    return 0;
  }
  *out = v;
  return 1;
}

int cli_scan_sizes(const char *text, int n, size_t *out) {
  const char *p = text;
  for (int i = 0; i < n; i++) {
    const char *end;
    if (!parse_digits(p, &end, &out[i]) || out[i] == 0 || (i + 1 < n ? *end != ',' : *end != '\0')) return 0;
    p = end + 1;
  }
  return 1;
}

int cli_parse_sizes(const char *opt, const char *text, int n, size_t *out, const char *what) {
  char shown[256];
  if (cli_scan_sizes(text, n, out)) return 1;
  cli_error(CLI_EXIT_USAGE, "option %s wants %s, %d positive integers (got '%s')", opt, what, n,
            cli_escape(text, shown, sizeof shown));
  return 0;
}

int cli_parse_patch(const char *text, size_t patch[3]) {
  char shown[256];
  if (!cli_parse_sizes("--patch", text, 3, patch, "pt,ph,pw")) return 0;
  for (int i = 0; i < 3; i++)
    if (patch[i] > CLI_MAX_PATCH) {
      cli_error(CLI_EXIT_USAGE, "option --patch: '%s': each size must be at most %zu",
                cli_escape(text, shown, sizeof shown), CLI_MAX_PATCH);
      return 0;
    }
  return 1;
}

/* ------------------------------------------------------------------------------------------------ shapes */

static const cli_shape NAMED[] = {
    {.name = "small", .B = 1, .H = 2, .D = 64, .F = 4, .S = 256},
    {.name = "d64", .B = 1, .H = 20, .D = 64, .F = 21, .S = 1560},
    {.name = "sana480", .B = 1, .H = 20, .D = 112, .F = 21, .S = 1560},
    {.name = "sana720", .B = 1, .H = 20, .D = 112, .F = 21, .S = 3600},
};

int cli_parse_shape(const char *cmd, const char *opt, const char *text, int names, cli_shape *out) {
  char shown[256];
  for (size_t i = 0; names && i < sizeof NAMED / sizeof NAMED[0]; i++)
    if (strcmp(text, NAMED[i].name) == 0) {
      *out = NAMED[i];
      return 1;
    }
  size_t v[5];
  if (!cli_scan_sizes(text, 5, v)) {
    cli_error(CLI_EXIT_USAGE, "%s: %s wants %sB,H,D,F,S, five positive integers (got '%s')", cmd, opt,
              names ? "small, d64, sana480, sana720 or " : "", cli_escape(text, shown, sizeof shown));
    return 0;
  }
  *out = (cli_shape){.name = text, .B = v[0], .H = v[1], .D = v[2], .F = v[3], .S = v[4]};
  return cli_check_shape(cmd, out);
}

int cli_check_shape(const char *cmd, const cli_shape *s) {
  char shown[256];
  const char *why = NULL;
  size_t N = 0, tok, st;
  if (s->D < CAMDELTA_MIN_HEAD_DIM || s->D > CAMDELTA_MAX_HEAD_DIM || s->D % CAMDELTA_HEAD_DIM_MULTIPLE)
    why = "D must be a multiple of 8 in [8, 128]";
  else if (!s->B || !s->H || !s->F || !s->S)
    why = "every size must be at least 1";
  else if (s->B > UINT32_MAX || s->H > UINT32_MAX)
    why = "B and H must be below 2^32";
  else if (!camdelta_size_mul(&N, s->F, s->S) || N > CLI_MAX_TOKENS)
    why = "N = F*S exceeds 2^32-1 tokens (the operations' limit)";
  else if (!camdelta_size_prod(&tok, 5, (const size_t[]){s->B, s->H, s->D, N, 8}) ||
           !camdelta_size_prod(&st, 6, (const size_t[]){s->B, s->H, s->F, s->D, s->D, 8}))
    why = "its tensors' sizes overflow size_t";
  if (!why) return 1;
  cli_error(CLI_EXIT_USAGE, "%s: shape '%s' (B=%zu H=%zu D=%zu F=%zu S=%zu): %s", cmd,
            cli_escape(s->name ? s->name : "", shown, sizeof shown), s->B, s->H, s->D, s->F, s->S, why);
  return 0;
}

void cli_grid_of(size_t S, size_t *Hs, size_t *Ws) {
  size_t h = 1;
  for (size_t i = 1; i <= S / i; i++) /* i*i <= S without forming i*i */
    if (S % i == 0) h = i;
  *Hs = h;
  *Ws = S / h;
}

int cli_check_grid(const size_t grid[3], size_t N, const char *from) {
  size_t S, n;
  if (!camdelta_size_mul(&S, grid[1], grid[2]) || !camdelta_size_mul(&n, grid[0], S) || n != N)
    return cli_error(CLI_EXIT_INPUT, "--grid %zu,%zu,%zu does not match N = %zu tokens of %s (expected T*Hs*Ws = N)",
                     grid[0], grid[1], grid[2], N, from);
  if (N > CLI_MAX_TOKENS)
    return cli_error(CLI_EXIT_INPUT, "%s: N = %zu tokens exceeds the operations' limit of 2^32-1", from, N);
  return CLI_EXIT_OK;
}

/* ------------------------------------------------------------------------------------------------ budget */

static void add(cli_budget *b, size_t *to, size_t times, size_t count, size_t es) {
  size_t bytes;
  if (!camdelta_size_prod(&bytes, 3, (const size_t[]){times, count, es}) || !camdelta_size_add(to, *to, bytes))
    b->overflow = 1;
}

void cli_budget_device(cli_budget *b, size_t times, size_t count, size_t es) {
  size_t one;
  add(b, &b->device, times, count, es);
  if (times && camdelta_size_mul(&one, count, es) && one > b->largest) b->largest = one;
}
void cli_budget_host(cli_budget *b, size_t times, size_t count, size_t es) { add(b, &b->host, times, count, es); }

int cli_budget_check(const cli_budget *b, camdelta_context *ctx, const char *what) {
  if (b->overflow) return cli_error(CLI_EXIT_INPUT, "%s: its buffers' sizes overflow size_t", what);
  if (ctx) {
    camdelta_device_info info;
    cl_ulong max_alloc = 0;
    if (camdelta_context_info(ctx, &info) != CAMDELTA_OK) return CLI_EXIT_OK;
    if (info.global_mem_bytes && (uint64_t)b->device > info.global_mem_bytes)
      return cli_error(CLI_EXIT_INPUT, "%s needs at least %.1f GiB on the device; %s has %.1f GiB", what,
                       (double)b->device / 1073741824.0, info.device_name,
                       (double)info.global_mem_bytes / 1073741824.0);
    if (clGetDeviceInfo(camdelta_context_device(ctx), CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc,
                        NULL) == CL_SUCCESS &&
        max_alloc && (uint64_t)b->largest > max_alloc)
      return cli_error(CLI_EXIT_INPUT, "%s needs a buffer of %.1f GiB; %s allocates at most %.1f GiB at once", what,
                       (double)b->largest / 1073741824.0, info.device_name, (double)max_alloc / 1073741824.0);
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && (double)b->host > (double)pages * (double)page)
    return cli_error(CLI_EXIT_INPUT, "%s needs at least %.1f GiB of host memory; this machine has %.1f GiB", what,
                     (double)b->host / 1073741824.0, (double)pages * (double)page / 1073741824.0);
  return CLI_EXIT_OK;
}
