#define _POSIX_C_SOURCE 200809L
/* libFuzzer target: the tool's shape and grid options (tools/cli_shape.c) and the library's size checks behind them.
 * An input is up to five lines: --shape, --grid, --patch, a count (--reps) and a chunk size. Each line goes through
 * the tool's one strict parser and its limits; what is accepted is checked against an independent 128-bit reading
 * of the same text (digits only, no zero, no overflow; N = F*S at most 2^32-1; the largest tensors within size_t;
 * T*Hs*Ws = N), the grid factoring against its definition, a budget against 128-bit sums, and the chunk bounds of
 * the library against their definition. The parsed sizes, accepted or not, then go to every operation of the
 * library with absent buffers: each must refuse them (never OK, never a crash or an allocation of their size).
 * cli_error and cli_escape, the tool's message printers, are replaced by a recorder here (no terminal output). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta.h"
#include "camdelta_helpers.h"
#include "cli_common.h"

typedef unsigned __int128 u128;

static int g_last_code;

int cli_error(int code, const char *fmt, ...) {
  g_last_code = code;
  (void)fmt;
  return code;
}

const char *cli_escape(const char *text, char *buf, size_t size) {
  if (size) snprintf(buf, size, "%s", text);
  return buf;
}

static camdelta_context *g_ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  setenv("CAMDELTA_CACHE", "0", 1);
  if (camdelta_context_create(&g_ctx, NULL) != CAMDELTA_OK) {
    fprintf(stderr, "fuzz_shape_options: no OpenCL context (%s): the operations are not called\n",
            camdelta_last_message());
    g_ctx = NULL;
  }
  return 0;
}

/* The n comma-separated fields of text as the grammar reads them: 1 and v[] when each is digits only, nonzero and
 * below 2^64; 0 otherwise. */
static int reference_sizes(const char *text, int n, u128 *v) {
  const char *p = text;
  for (int i = 0; i < n; i++) {
    u128 x = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
      x = x * 10 + (u128)(*p++ - '0');
      if (x > (u128)SIZE_MAX) return 0;
      digits++;
    }
    if (!digits || x == 0) return 0;
    v[i] = x;
    if (i + 1 < n) {
      if (*p != ',') return 0;
      p++;
    }
  }
  return *p == '\0';
}

static void check_shape(const char *text) {
  cli_shape s;
  const int ok = cli_parse_shape("fuzz", "--shape", text, 1, &s);
  u128 v[5];
  const int named = !strcmp(text, "small") || !strcmp(text, "d64") || !strcmp(text, "sana480") ||
                    !strcmp(text, "sana720");
  if (!named && reference_sizes(text, 5, v)) {
    const u128 B = v[0], H = v[1], D = v[2], F = v[3], S = v[4], N = F * S;
    /* products of at most five factors below 2^64 do not overflow 128 bits once N fits 32 bits */
    const int within = D >= 8 && D <= 128 && D % 8 == 0 && B <= UINT32_MAX && H <= UINT32_MAX && N <= UINT32_MAX &&
                       B * H <= (u128)SIZE_MAX && B * H * D * N <= (u128)SIZE_MAX / 8 &&
                       B * H * F <= (u128)SIZE_MAX && B * H * F * D * D <= (u128)SIZE_MAX / 8;
    if (ok != within) abort();
    if (ok && (s.B != B || s.H != H || s.D != D || s.F != F || s.S != S)) abort();
  } else if (!named && ok) {
    abort(); /* accepted what the grammar refuses */
  }
  if (!ok) {
    if (g_last_code != CLI_EXIT_USAGE) abort();
    return;
  }
  /* the grid factoring: Hs x Ws = S, Hs <= Ws, and no divisor of S between Hs and sqrt(S) */
  size_t Hs, Ws;
  cli_grid_of(s.S, &Hs, &Ws);
  if ((u128)Hs * Ws != s.S || Hs > Ws) abort();
  for (u128 d = (u128)Hs + 1; d * d <= s.S; d++)
    if (s.S % (size_t)d == 0) abort();
  /* a budget: the overflow flag exactly when the 128-bit sum leaves size_t */
  cli_budget b = {0, 0, 0, 0};
  const size_t N = s.F * s.S;
  u128 sum = 0;
  const size_t counts[3][2] = {{s.B * s.H, N}, {s.D * 7, N}, {s.B, s.F * 20}};
  for (int i = 0; i < 3; i++) {
    cli_budget_device(&b, counts[i][0], counts[i][1], s.D * s.H);
    sum += (u128)counts[i][0] * counts[i][1] * (s.D * s.H);
  }
  if (b.overflow != (sum > (u128)SIZE_MAX) || (!b.overflow && b.device != (size_t)sum)) abort();
}

static void check_grid(const char *grid_text, const char *tokens_text) {
  size_t g[3];
  const int ok = cli_scan_sizes(grid_text, 3, g);
  u128 v[3];
  if (ok != reference_sizes(grid_text, 3, v)) abort();
  if (!ok) return;
  size_t N = 0;
  u128 t[1];
  if (!reference_sizes(tokens_text, 1, t)) return;
  N = (size_t)t[0];
  /* the tool forms S = Hs*Ws, then T*S: Hs*Ws must fit size_t; then T*S (below 2^128) must equal N */
  const int fits = v[1] * v[2] <= (u128)SIZE_MAX && v[0] * (v[1] * v[2]) == (u128)N && N <= UINT32_MAX;
  if ((cli_check_grid(g, N, "fuzz") == CLI_EXIT_OK) != fits) abort();
}

/* The library's chunk bounds for T frames: strictly increasing from 0 to T, within T + 1 entries; or refused. */
static void check_chunks(size_t T, size_t cs, int strategy) {
  if (T > ((size_t)1 << 16)) { /* beyond that, only the refusal of T >= 2^32 (no buffer of T + 1 entries here) */
    size_t b[4], n;
    const camdelta_chunking ch = {cs, (camdelta_chunk_strategy)(strategy % 3), NULL, 0};
    if (T > UINT32_MAX && camdelta_chunk_bounds(T, &ch, b, 4, &n) != CAMDELTA_ERROR_UNSUPPORTED) abort();
    return;
  }
  size_t *b = malloc((T + 1) * sizeof *b), n = 0;
  if (!b) return;
  const camdelta_chunking ch = {cs, (camdelta_chunk_strategy)(strategy % 3), NULL, 0};
  for (int conv = 0; conv < 2; conv++) {
    const camdelta_status st =
        conv ? camdelta_conv_bounds(T, &ch, b, T + 1, &n) : camdelta_chunk_bounds(T, &ch, b, T + 1, &n);
    if (st != CAMDELTA_OK) abort(); /* T >= 1 and a known strategy: always bounds */
    if (n < 2 || b[0] != 0 || b[n - 1] != T) abort();
    for (size_t i = 1; i < n; i++)
      if (b[i] <= b[i - 1]) abort();
  }
  free(b);
}

/* Every operation with these sizes and no buffers: a refusal, whatever the sizes. */
static void check_library(const size_t v[5], size_t cs) {
  if (!g_ctx) return;
  const size_t B = v[0], H = v[1], D = v[2], F = v[3], S = v[4];
  camdelta_scan_args sa;
  memset(&sa, 0, sizeof sa);
  sa.B = B, sa.H = H, sa.D = D, sa.F = F, sa.S = S;
  char plan[512];
  camdelta_scan_plan_describe(g_ctx, &sa, plan, sizeof plan); /* any status; no crash */
  if (camdelta_scan_forward(g_ctx, &sa, NULL) == CAMDELTA_OK) abort();
  camdelta_scan_backward_args sb;
  memset(&sb, 0, sizeof sb);
  sb.B = B, sb.H = H, sb.D = D, sb.F = F, sb.S = S;
  if (camdelta_scan_backward(g_ctx, &sb, NULL) == CAMDELTA_OK) abort();
  camdelta_prep_args pa;
  memset(&pa, 0, sizeof pa);
  pa.B = B, pa.N = F, pa.H = H, pa.D = D;
  if (camdelta_prep_forward(g_ctx, &pa, NULL) == CAMDELTA_OK) abort();
  const camdelta_camera_args ca = {.B = B, .T = F, .Hs = S, .Ws = H, .pt = 1, .ph = 1, .pw = 1, .D = D};
  if (camdelta_camera_forward(g_ctx, &ca) == CAMDELTA_OK) abort();
  camdelta_short_conv_args sc;
  memset(&sc, 0, sizeof sc);
  sc.B = B, sc.T = F, sc.S = S, sc.C = H, sc.chunking.chunk_size = cs;
  if (camdelta_short_conv_forward(g_ctx, &sc) == CAMDELTA_OK) abort();
  camdelta_output_transform_args oa;
  memset(&oa, 0, sizeof oa);
  oa.B = B, oa.N = F, oa.H = H, oa.D = D;
  if (camdelta_output_transform_forward(g_ctx, &oa) == CAMDELTA_OK) abort();
  camdelta_branch_args ba;
  memset(&ba, 0, sizeof ba);
  ba.B = B, ba.T = F, ba.Hs = S, ba.Ws = H, ba.H = H, ba.D = D, ba.pt = ba.ph = ba.pw = 1, ba.chunking.chunk_size = cs;
  if (camdelta_branch_forward(g_ctx, &ba, NULL) == CAMDELTA_OK) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char text[512];
  if (size >= sizeof text) size = sizeof text - 1;
  memcpy(text, data, size);
  text[size] = '\0';
  /* lines: shape, grid, patch, count, chunk size (missing ones empty) */
  char *line[5] = {"", "", "", "", ""};
  char *p = text;
  for (int i = 0; i < 5 && p; i++) {
    line[i] = p;
    char *nl = strchr(p, '\n');
    if (nl) *nl = '\0';
    p = nl ? nl + 1 : NULL;
  }
  check_shape(line[0]);
  check_grid(line[1], line[3]);
  size_t patch[3], count, cs = 0;
  const int pok = cli_parse_patch(line[2], patch);
  u128 pv[3];
  if (pok != (reference_sizes(line[2], 3, pv) && pv[0] <= CLI_MAX_PATCH && pv[1] <= CLI_MAX_PATCH &&
              pv[2] <= CLI_MAX_PATCH))
    abort();
  const int cok = cli_parse_count("--reps", line[3], 1, CLI_MAX_REPS, &count);
  u128 c1[1];
  if (cok != (reference_sizes(line[3], 1, c1) && c1[0] <= CLI_MAX_REPS)) abort();
  u128 csv[1];
  if (reference_sizes(line[4], 1, csv)) cs = (size_t)csv[0];
  /* the library, with the raw sizes of the shape line (not only those the tool accepts) */
  u128 v[5];
  if (reference_sizes(line[0], 5, v)) {
    const size_t sv[5] = {(size_t)v[0], (size_t)v[1], (size_t)v[2], (size_t)v[3], (size_t)v[4]};
    check_chunks(sv[3], cs, (int)(sv[4] % 3));
    check_library(sv, cs);
  }
  return 0;
}
