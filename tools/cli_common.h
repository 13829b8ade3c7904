/* Shared pieces of the camdelta command-line tool: exit codes, error output,
 * option parsing, and moving .npy files to and from the device. */
#ifndef CAMDELTA_CLI_COMMON_H
#define CAMDELTA_CLI_COMMON_H

#include <stddef.h>

#include "camdelta.h"
#include "camdelta_helpers.h"
#include "camdelta_npy.h"
#include "camdelta_ref.h"
#include "cli_error.h"  /* error output and exit codes */
#include "cli_outset.h" /* output sets, all or nothing */
#include "cli_shape.h"  /* the size options' parser, shape limits and budgets */

/* ------------------------------------------------------------ option parsing */
typedef struct cli_args {
  int argc;
  char **argv;
  int i; /* index of the argument being looked at */
} cli_args;

/** 1 when argv[i] is exactly the flag `name` (e.g. "--reverse"); advances past it. */
int cli_flag(cli_args *a, const char *name);
/** When argv[i] is "--name VALUE" or "--name=VALUE": sets *value, advances,
 *  returns 1. Returns -1 (after printing a usage error) when the value is
 *  missing, 0 when argv[i] is another argument. */
int cli_value(cli_args *a, const char *name, const char **value);
/** The benchmarks' --reps N (1 to CLI_MAX_REPS) and --warmup N (0 to CLI_MAX_REPS): as cli_value, 1 when argv[i]
 *  was one of them and its value parsed into *reps or *warmup, -1 (after a usage error) on a bad value. */
int cli_reps_option(cli_args *a, size_t *reps, size_t *warmup);
/** What every sequence-parallel command reads alike: --sequence-parallel (which chose the command: nothing more),
 *  --no-branch (*branch = 0) and --algorithm NAME (*alg): as cli_value, 1 when argv[i] was one of them, -1 after
 *  a usage error. */
int cli_sp_option(cli_args *a, int *branch, camdelta_scan_algorithm *alg);
/** The process's resident memory in MiB (Linux /proc), -1 where it cannot be read. */
double cli_rss_mib(void);
/** The demos' cameras: one at c looking at the origin (up (0, 1, 0)), then turned by `yaw` radians about the
 *  vertical axis; its camera-to-world matrix (axes as columns, the centre last) row-major in cc[0 .. 15]. */
void cli_look_at_origin(const double c[3], double yaw, float cc[16]);
/** --seed N: as cli_value, 1 when argv[i] was --seed and N (a size) is mixed into *state (the demos' random
 *  generator), -1 (after a usage error) on a bad value. */
int cli_seed_option(cli_args *a, unsigned long long *state);
/** What both demos (demo, demo --stream) read alike: --shape (into *shape, named shapes taken), --chunk-strategy,
 *  --device and --seed (cli_seed_option): as cli_value, 1 when argv[i] was one of them, -1 after a usage error. */
int cli_demo_option(cli_args *a, cli_shape *shape, camdelta_chunk_strategy *strategy, const char **device,
                    unsigned long long *seed);
/** The last branch of a command's option loop, at an option no other branch took: --help or -h prints the usage
 *  (`usage`) and gives 1; anything else gives 0 after the usage error "WHAT: unknown option 'X' (see 'camdelta help
 *  TOPIC')". */
int cli_help_or_unknown(cli_args *a, const char *what, const char *topic, void (*usage)(void));
/** Parse a finite number >= 0 for option `opt` (no sign, no leading space, no inf/nan); 0 (after printing a
 *  usage error) on failure. */
int cli_parse_double(const char *opt, const char *text, double *out);
/** The median of x[0 .. n-1] (n >= 1); sorts x in place. */
double cli_median(double *x, size_t n);
/** A monotonic host clock in milliseconds: the timing where the driver gives no kernel times (a profile's kernel_ms
 *  is then NaN), taken around camdelta_finish. */
double cli_now_ms(void);
/** Parse --algorithm's value: auto, sequential or chunkwise; 0 (after printing a usage error) otherwise. */
int cli_parse_algorithm(const char *text, camdelta_scan_algorithm *out);
/** Parse --chunk-strategy's value: uniform, first_frame or first_chunk_plus_one; 0 (after printing a usage error)
 *  otherwise. */
int cli_parse_strategy(const char *text, camdelta_chunk_strategy *out);
/** Parse --precision's value: exact or tf32; 0 (after printing a usage error) otherwise. */
int cli_parse_precision(const char *text, camdelta_precision *out);
/* The options that every form of `camdelta run` reads alike (prep, scan, the camera branch, --sequence-parallel):
 * each command checks afterwards which of them apply to its operation. */
typedef struct cli_run_opts {
  const char *op_name, *in, *out, *device; /* op_name: the operation word, set by the command */
  double k_scale, norm_eps;                /* norm_eps 1e-6 unless given */
  int have_k_scale, have_norm_eps, have_algorithm, quiet;
  camdelta_scan_algorithm algorithm; /* CAMDELTA_SCAN_AUTO unless given */
} cli_run_opts;
enum { CLI_OPT_ERROR = -1, CLI_OPT_OTHER = 0, CLI_OPT_TAKEN = 1, CLI_OPT_HELP = 2 };
/** The defaults: nothing given, norm_eps 1e-6, algorithm auto. */
void cli_run_opts_init(cli_run_opts *o);
/** Take argv[i] (and its value) when it is --in, --out, --device, --k-scale, --norm-eps, --algorithm, --quiet/-q
 *  (CLI_OPT_TAKEN) or --help/-h (CLI_OPT_HELP, after printing the usage of run: the command ends with exit 0);
 *  CLI_OPT_ERROR after printing a usage error (a missing or malformed value); CLI_OPT_OTHER for any other
 *  argument, left where it is. */
int cli_run_option(cli_args *a, cli_run_opts *o);
/** An argument of `run` that no option took: the operation (o->op_name, argv[i] taken: 1), or 0 after a usage
 *  error when it looks like an option or the operation is already named. */
int cli_run_operand(cli_args *a, cli_run_opts *o);

/* -------------------------------------------------------------- tensors */
/** Shape formatted as "(2, 3)" (or "()" for a scalar) into buf. */
const char *cli_shape_str(char *buf, size_t size, int ndim, const size_t *shape);

typedef struct cli_tensor {
  char path[4096];
  camdelta_npy npy; /* as read (type converted by cli_tensor_convert) */
  int present;
} cli_tensor;

/** Read DIR/NAME.npy. Returns CLI_EXIT_OK; or, when the file is missing:
 *  CLI_EXIT_OK with t->present = 0 if `optional`, else an input error naming
 *  the file and `expect` (a description of the expected shape). A malformed
 *  file or an unsupported dtype is an input error naming the file. */
int cli_tensor_load(cli_tensor *t, const char *dir, const char *name, int optional, const char *expect);
/** Check that a loaded tensor has exactly `ndim` dims `shape`; an input
 *  error naming the file, its shape and the expected one (with `symbols`,
 *  e.g. "(B, H, D, N)") otherwise. */
int cli_tensor_expect(const cli_tensor *t, int ndim, const size_t *shape, const char *symbols);
/** cli_tensor_load and the shape check in one: a present file must have exactly `ndim` dims `shape` (the
 *  missing-file message names "<symbols> = <shape>"); ndim < 0: any shape of -ndim dims (`shape` unused, the
 *  message names `symbols`). The data keep the file's dtype. */
int cli_tensor_load_shaped(cli_tensor *t, const char *dir, const char *name, int optional, int ndim,
                           const size_t *shape, const char *symbols);
/** cli_tensor_load_shaped, then the conversion to f32. */
int cli_tensor_load_f32(cli_tensor *t, const char *dir, const char *name, int optional, int ndim, const size_t *shape,
                        const char *symbols);
/** The scan's input files, in the order the scan runners keep them (cmd_run_packed.c, cmd_run_sp.c). */
enum { CLI_SCAN_Q, CLI_SCAN_K, CLI_SCAN_V, CLI_SCAN_BETA, CLI_SCAN_DECAY, CLI_SCAN_GO, CLI_SCAN_INIT, CLI_SCAN_GF,
       CLI_SCAN_COUNT };
/** cli_tensor_load_f32 of the scan's inputs that q and beta fix: k and v of shape tok, decay of shape dc,
 *  init_state (optional) of shape st, and for the backward grad_out (tok) and grad_final_state (optional, st); the
 *  *_sym strings name each shape in messages. Stops at the first error. */
int cli_load_scan_inputs(cli_tensor t[CLI_SCAN_COUNT], const char *in, int backward, const size_t tok[4],
                         const char *tok_sym, const size_t dc[3], const char *dc_sym, const size_t st[4],
                         const char *st_sym);
/** Convert the data in place to `type` (f8 -> f4, f2 <-> f4; f4/f8 -> f2
 *  rounds to nearest even). */
int cli_tensor_convert(cli_tensor *t, camdelta_npy_type type);
/** The activations of an operation in `dtype`: f32 as <f4, f16 as <f2, bf16 as <u2 (bfloat16 bits, kept as read);
 *  float files are converted (to 16 bits rounding to nearest even), a <u2 file is taken for bf16 only. */
int cli_tensor_activations(cli_tensor *t, camdelta_dtype dtype);
/** The .npy type of activations in `dtype` (<f4, <f2, <u2). */
camdelta_npy_type cli_npy_type_of(camdelta_dtype dtype);
/** Parse --dtype f32|f16|bf16 into *out; a usage error naming `what` otherwise. */
int cli_parse_dtype(const char *what, const char *v, camdelta_dtype *out);
void cli_tensor_free(cli_tensor *t);

/** Upload a loaded tensor into a new device buffer (at least 4 bytes). */
int cli_upload(camdelta_context *ctx, const cli_tensor *t, cl_mem *out);
/** A new device buffer of `bytes` (at least 4), zero-filled. */
int cli_alloc(camdelta_context *ctx, size_t bytes, cl_mem *out);
/* Output sets, all or nothing: tools/cli_outset.h (cli_make_dir, cli_outset_*). */

/* One output of a command: DIR/NAME.npy of `type` and `shape`, from the device buffer `mem`. */
typedef struct cli_output {
  const char *name;
  cl_mem mem;
  camdelta_npy_type type;
  int ndim;
  size_t shape[5];
} cli_output;
/** Fill *out and give it a new zero-filled device buffer (an input error when its size overflows size_t). */
int cli_output_alloc(camdelta_context *ctx, cli_output *out, const char *name, camdelta_npy_type type, int ndim,
                     const size_t *shape);
/** Create `dir` and write the `n` outputs there, all or nothing (an output set). */
int cli_write_outputs(camdelta_context *ctx, const char *dir, const cli_output *outs, int n);
/** The end of `camdelta run OP`: the call's status, camdelta_finish, the outputs written (cli_write_outputs), then
 *  unless `quiet` the line "camdelta run OP: DETAIL on DEVICE: T ms in K kernels; wrote NAMES to DIR". */
int cli_run_finish(camdelta_context *ctx, camdelta_status st, const char *call, const camdelta_profile *prof,
                   const char *op_name, const char *detail, const cli_output *outs, int n, const char *dir, int quiet);

/** Create the context for `selector` (NULL: CAMDELTA_DEVICE / default);
 *  a device error (exit 4) naming the selector otherwise. */
int cli_context(camdelta_context **ctx, const char *selector);
/** The budget's host part checked, then the context for `selector` created and the budget's device part checked
 *  (`what` names the shape in messages): 0 with *ctx, or the exit code with no context left. */
int cli_context_for(camdelta_context **ctx, const char *selector, const cli_budget *bud, const char *what);

/* -------------------------------------------------------------- commands */
int cmd_info(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_demo(int argc, char **argv);
/* camera-branch operations of `run` (tools/cmd_run_branch.c) */
int cli_is_branch_run(int argc, char **argv);
int cmd_run_branch(int argc, char **argv);

#endif
