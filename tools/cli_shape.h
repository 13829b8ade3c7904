/* Sizes on the command line (tools/cli_shape.c): the one strict parser of every size option, the library's limits on
 * the shapes the commands build, and what a shape needs, every product and sum through camdelta_size_mul / _add /
 * _prod (camdelta_helpers.h). A hostile value (a sign, a space, a suffix, zero, an overflow, a shape past the
 * library's limits) is a usage error (exit 2) as soon as it is parsed; a shape within the limits that cannot fit
 * the device or the host is an input error (exit 3) before anything of its size is allocated. */
#ifndef CAMDELTA_CLI_SHAPE_H
#define CAMDELTA_CLI_SHAPE_H

#include <stddef.h>

#include "camdelta.h"

/** The largest token count (and so frame count) an operation takes: N < 2^32 (the library refuses F, S, T >= 2^32). */
#define CLI_MAX_TOKENS ((size_t)4294967295u)
/** The largest --reps / --warmup. */
#define CLI_MAX_REPS ((size_t)100000)

/** Parse a positive decimal integer for option `opt`: digits only (no sign, space or suffix), no overflow of
 *  size_t; 0 (after printing a usage error) on failure. */
int cli_parse_size(const char *opt, const char *text, size_t *out);
/** cli_parse_size within [lo, hi] ("0" allowed when lo is 0); 0 after a usage error naming the range. */
int cli_parse_count(const char *opt, const char *text, size_t lo, size_t hi, size_t *out);
/** Quiet form of cli_parse_sizes: 1 when `text` is exactly `n` comma-separated positive integers. */
int cli_scan_sizes(const char *text, int n, size_t *out);
/** Parse exactly `n` comma-separated positive integers (each as cli_parse_size) for option `opt`; `what` names
 *  them for the message (e.g. "T,Hs,Ws"). 0 (after printing a usage error) on failure. */
int cli_parse_sizes(const char *opt, const char *text, int n, size_t *out, const char *what);

/** --patch pt,ph,pw: three sizes each at most CLI_MAX_PATCH (a patch's pixels are divided as f32: beyond 2^24 they
 *  are no longer exact). 0 after a usage error. */
#define CLI_MAX_PATCH ((size_t)16777216)
int cli_parse_patch(const char *text, size_t patch[3]);

/** A scan shape: B sequences of H heads of head dim D, F frames of S tokens (N = F*S). */
typedef struct cli_shape {
  const char *name; /* the named shape, or the option's text */
  size_t B, H, D, F, S;
} cli_shape;
/** --shape of demo, bench, tune and their --sequence-parallel forms: a name (small, d64, sana480, sana720; `names`
 *  0: none accepted) or B,H,D,F,S through cli_scan_sizes, then cli_check_shape. 0 after a usage error naming `cmd`
 *  and `opt`. */
int cli_parse_shape(const char *cmd, const char *opt, const char *text, int names, cli_shape *out);
/** The library's limits on a scan shape: D a supported head dim, B and H below 2^32, N = F*S at most
 *  CLI_MAX_TOKENS, and the largest tensors (B*H*D*N tokens, B*H*F*D*D saved states) 8-byte elements within size_t.
 *  0 after a usage error naming `cmd` and the shape. */
int cli_check_shape(const char *cmd, const cli_shape *s);
/** The most square factorisation Hs x Ws = S with Hs <= Ws (S >= 1; no product that can wrap). */
void cli_grid_of(size_t S, size_t *Hs, size_t *Ws);
/** A --grid T,Hs,Ws against the N tokens of file `from`: T*Hs*Ws = N (checked products) and N <= CLI_MAX_TOKENS;
 *  an input error (exit 3) otherwise. */
int cli_check_grid(const size_t grid[3], size_t N, const char *from);

/** What a command will allocate for one shape, in bytes: on the device and on the host. Each add is checked;
 *  an overflow is kept and reported by cli_budget_check. */
typedef struct cli_budget {
  size_t device, host, largest; /* largest: the largest single device buffer */
  int overflow;
} cli_budget;
/** count elements of es bytes, `times` times (buffers), on the device (host). */
void cli_budget_device(cli_budget *b, size_t times, size_t count, size_t es);
void cli_budget_host(cli_budget *b, size_t times, size_t count, size_t es);
/** An input error (exit 3) naming `what` when the sizes overflowed, when the device bytes exceed the global memory of
 *  ctx's device or one buffer its largest allocation (ctx NULL: not checked), or when the host bytes exceed the
 *  machine's physical memory; CLI_EXIT_OK otherwise. */
int cli_budget_check(const cli_budget *b, camdelta_context *ctx, const char *what);

#endif
