/* camdelta run camera | short-conv | output-transform | branch | branch-backward (docs/branch.md): the camera-branch
 * operations on .npy files, with the conventions of `camdelta run` (exit codes 2 usage, 3 bad input, 4 device). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_job.h"
#include "cli_stream.h"

typedef enum br_op { BR_CAMERA, BR_CONV, BR_OT, BR_BRANCH, BR_BACKWARD } br_op;

static int op_of(const char *name, br_op *op) {
  static const char *const names[5] = {"camera", "short-conv", "output-transform", "branch", "branch-backward"};
  for (int i = 0; i < 5; i++)
    if (strcmp(name, names[i]) == 0) {
      if (op) *op = (br_op)i;
      return 1;
    }
  return 0;
}

/* Options that take a value (so that their values are not taken for the operation's name). */
static int takes_value(const char *arg) {
  static const char *const opts[] = {"--in",         "--out",      "--device",         "--k-scale",
                                     "--norm-eps",   "--algorithm", "--tokens-per-frame", "--grid",
                                     "--patch",      "--head-dim", "--chunk-size",     "--chunk-strategy",
                                     "--repeat",     "--dtype"};
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
    if (strcmp(arg, opts[i]) == 0) return 1;
  return 0;
}

int cli_is_branch_run(int argc, char **argv) {
  for (int i = 0; i < argc; i++) {
    if (argv[i][0] == '-' && argv[i][1] != '\0') {
      if (takes_value(argv[i])) i++;
      continue;
    }
    return op_of(argv[i], NULL);
  }
  return 0;
}

typedef struct br_opts {
  cli_run_opts c; /* --in --out --device --k-scale --norm-eps --algorithm --quiet */
  br_op op;
  size_t grid[3], patch[3], head_dim, chunk_size;
  int have_grid, have_patch, have_strategy, have_dtype;
  camdelta_chunk_strategy strategy;
  int stream, have_repeat; /* --stream, --repeat K */
  size_t repeat;
  camdelta_dtype dtype; /* of branch's and branch-backward's activations */
} br_opts;

/* ------------------------------------------------------------------------------------------- the job */

/* Load DIR/NAME.npy (f32 after conversion) with exactly `shape` (ndim < 0: any 4-d shape, checked by the caller). */
static int load(cli_job *j, const char *name, int ndim, const size_t *shape, const char *symbols, int *idx) {
  int rc = cli_job_slot(j, 0, idx);
  return rc ? rc : cli_tensor_load_f32(&j->in[*idx], j->opts->in, name, 0, ndim, shape, symbols);
}

/* The same for activations in `dtype` (cli_tensor_activations: <u2 taken with bf16 only, floats rounded). */
static int load_act(cli_job *j, camdelta_dtype dtype, const char *name, int ndim, const size_t *shape,
                    const char *symbols, int *idx) {
  int rc = cli_job_slot(j, 0, idx);
  if (!rc) rc = cli_tensor_load_shaped(&j->in[*idx], j->opts->in, name, 0, ndim, shape, symbols);
  return rc ? rc : cli_tensor_activations(&j->in[*idx], dtype);
}

static int add_output(cli_job *j, const char *name, int ndim, const size_t *shape) {
  return cli_job_output(j, name, CAMDELTA_NPY_F4, ndim, shape);
}

/* The grid must give N tokens (N from `from`), within the operations' limit (cli_check_grid). */
static int check_grid(const br_opts *o, size_t N, const char *from) { return cli_check_grid(o->grid, N, from); }

/* Chunking from the options and the optional chunk_index file, validated for T frames (an input error names the
 * file). */
static int chunking_of(cli_job *j, const br_opts *o, size_t T, camdelta_chunking *ch) {
  memset(ch, 0, sizeof *ch);
  ch->chunk_size = o->chunk_size;
  ch->strategy = o->strategy;
  int ici, rc;
  if ((rc = cli_job_slot(j, 1, &ici))) return rc;
  const cli_tensor *ci = &j->in[ici];
  if ((rc = cli_tensor_load(&j->in[ici], j->opts->in, "chunk_index", 1, "(K,) <i8"))) return rc;
  if (ci->present) {
    const camdelta_npy *n = &ci->npy;
    if (n->type != CAMDELTA_NPY_I8)
      return cli_error(CLI_EXIT_INPUT, "%s: dtype is not <i8 (expected int64 frame starts)", ci->path);
    if (n->ndim != 1 || n->count == 0)
      return cli_error(CLI_EXIT_INPUT, "%s: expected a non-empty 1-d array of frame starts", ci->path);
    ch->chunk_index = (const int64_t *)n->data;
    ch->chunk_index_count = n->count;
  }
  size_t *b = calloc(T + 1, sizeof *b), nb; /* T <= CLI_MAX_TOKENS (check_grid) */
  if (!b) return cli_error(CLI_EXIT_FAILURE, "out of host memory");
  camdelta_status st = camdelta_chunk_bounds(T, ch, b, T + 1, &nb);
  free(b);
  if (st) {
    if (ci->present) return cli_error(cli_exit_code(st), "%s: %s", ci->path, camdelta_last_message());
    return cli_lib_error(st, "chunking");
  }
  return CLI_EXIT_OK;
}

static void chunk_str(char *buf, size_t size, const camdelta_chunking *ch) {
  if (ch->chunk_index)
    snprintf(buf, size, "chunk_index (%zu starts)%s", ch->chunk_index_count, ch->chunk_size ? " + chunk size" : "");
  else if (ch->chunk_size)
    snprintf(buf, size, "chunk_size %zu %s", ch->chunk_size, camdelta_chunk_strategy_name(ch->strategy));
  else
    snprintf(buf, size, "one chunk");
}

/* --------------------------------------------------------------------------------------- operations */

static int run_camera(cli_job *j, const br_opts *o) {
  int icc, rc;
  if (!o->have_grid) return cli_error(CLI_EXIT_USAGE, "run camera: missing --grid T,Hs,Ws");
  if (!o->head_dim) return cli_error(CLI_EXIT_USAGE, "run camera: missing --head-dim D");
  if ((rc = load(j, "camera_conditions", -3, NULL, "(B, T, 20)", &icc))) return rc;
  const size_t *s = j->in[icc].npy.shape, B = s[0], T = o->grid[0], Hs = o->grid[1], Ws = o->grid[2], D = o->head_dim;
  if (s[1] != T || s[2] != 20)
    return cli_error(CLI_EXIT_INPUT, "%s: shape (%zu, %zu, %zu) does not fit: expected (B, T, 20) with T = %zu from "
                     "--grid", j->in[icc].path, s[0], s[1], s[2], T);
  if (D < 8 || D > 128 || D % 8)
    return cli_error(CLI_EXIT_INPUT, "--head-dim %zu unsupported (expected a multiple of 8 in [8, 128])", D);
  size_t N = 0, S = 0;
  if (!camdelta_size_mul(&S, Hs, Ws) || !camdelta_size_mul(&N, T, S) || N > CLI_MAX_TOKENS)
    return cli_error(CLI_EXIT_INPUT, "--grid %zu,%zu,%zu: N = T*Hs*Ws exceeds the operations' limit of 2^32-1 tokens",
                     T, Hs, Ws);
  const size_t bn44[4] = {B, N, 4, 4}, ndh[2] = {N, D / 2};
  if ((rc = cli_job_start(j)) || (rc = add_output(j, "proj_q", 4, bn44)) ||
      (rc = add_output(j, "proj_kv", 4, bn44)) || (rc = add_output(j, "proj_o", 4, bn44)) ||
      (rc = add_output(j, "rope_cos", 2, ndh)) || (rc = add_output(j, "rope_sin", 2, ndh)))
    return rc;
  camdelta_profile prof = {0, 0};
  const camdelta_camera_args a = {.B = B, .T = T, .Hs = Hs, .Ws = Ws, .pt = o->patch[0], .ph = o->patch[1],
                                  .pw = o->patch[2], .D = D, .camera_conditions = cli_job_in(j, icc),
                                  .proj_q = cli_job_out(j, "proj_q"), .proj_kv = cli_job_out(j, "proj_kv"),
                                  .proj_o = cli_job_out(j, "proj_o"), .rope_cos = cli_job_out(j, "rope_cos"),
                                  .rope_sin = cli_job_out(j, "rope_sin"), .profile = &prof};
  char detail[256];
  snprintf(detail, sizeof detail, "B=%zu grid %zux%zux%zu patch %zu,%zu,%zu D=%zu", B, T, Hs, Ws, o->patch[0],
           o->patch[1], o->patch[2], D);
  return cli_job_finish(j, camdelta_camera_forward(j->ctx, &a), "camdelta_camera_forward", &prof, detail);
}

static int run_conv(cli_job *j, const br_opts *o) {
  int ik, iw, rc;
  if (!o->have_grid) return cli_error(CLI_EXIT_USAGE, "run short-conv: missing --grid T,Hs,Ws");
  if ((rc = load(j, "k_raw", -4, NULL, "(B, N, H, D)", &ik))) return rc;
  const size_t *s = j->in[ik].npy.shape, B = s[0], N = s[1], H = s[2], D = s[3];
  if ((rc = check_grid(o, N, j->in[ik].path))) return rc;
  /* H*D divides the element count of the file just read: no overflow */
  const size_t C = H * D, c4[2] = {C, 4}, bnhd[4] = {B, N, H, D};
  if ((rc = load(j, "conv_weight", 2, c4, "(C, 4) with C = H*D", &iw))) return rc;
  camdelta_chunking ch;
  if ((rc = chunking_of(j, o, o->grid[0], &ch))) return rc;
  if ((rc = cli_job_start(j)) || (rc = add_output(j, "k_conv", 4, bnhd))) return rc;
  camdelta_profile prof = {0, 0};
  const camdelta_short_conv_args a = {.B = B, .T = o->grid[0], .S = o->grid[1] * o->grid[2], .C = C, .chunking = ch,
                                      .k_raw = cli_job_in(j, ik), .conv_weight = cli_job_in(j, iw),
                                      .k_conv = cli_job_out(j, "k_conv"), .profile = &prof};
  char detail[256], cs[96];
  chunk_str(cs, sizeof cs, &ch);
  snprintf(detail, sizeof detail, "B=%zu T=%zu S=%zu C=%zu, %s", B, o->grid[0], o->grid[1] * o->grid[2], C, cs);
  return cli_job_finish(j, camdelta_short_conv_forward(j->ctx, &a), "camdelta_short_conv_forward", &prof, detail);
}

static int run_ot(cli_job *j) {
  int io, ip, ic, is, rc;
  if ((rc = load(j, "out", -4, NULL, "(B, H, D, N)", &io))) return rc;
  const size_t *s = j->in[io].npy.shape, B = s[0], H = s[1], D = s[2], N = s[3];
  const size_t bn44[4] = {B, N, 4, 4}, ndh[2] = {N, D / 2}, bnhd[4] = {B, N, H, D};
  if ((rc = load(j, "proj_o", 4, bn44, "(B, N, 4, 4)", &ip)) || (rc = load(j, "rope_cos", 2, ndh, "(N, D/2)", &ic)) ||
      (rc = load(j, "rope_sin", 2, ndh, "(N, D/2)", &is)))
    return rc;
  if ((rc = cli_job_start(j)) || (rc = add_output(j, "y", 4, bnhd))) return rc;
  camdelta_profile prof = {0, 0};
  const camdelta_output_transform_args a = {.B = B, .N = N, .H = H, .D = D, .out = cli_job_in(j, io),
                                            .proj_o = cli_job_in(j, ip), .rope_cos = cli_job_in(j, ic),
                                            .rope_sin = cli_job_in(j, is), .y = cli_job_out(j, "y"), .profile = &prof};
  char detail[128];
  snprintf(detail, sizeof detail, "B=%zu N=%zu H=%zu D=%zu", B, N, H, D);
  return cli_job_finish(j, camdelta_output_transform_forward(j->ctx, &a), "camdelta_output_transform_forward", &prof,
                        detail);
}

/* --stream: the sequence through a stream (cmd_run_stream.c), its blocks those of the chunk schedule. */
static int run_stream(cli_job *j, const br_opts *o, camdelta_branch_args *a, int iq, const size_t bnhd[4]) {
  size_t blocks;
  if (!cli_stream_tiles(a->T, o->chunk_size, o->strategy, &blocks))
    return cli_error(CLI_EXIT_INPUT, "%s: T = %zu frames (--grid) is not a whole number of blocks of the schedule "
                     "(%s, chunk size %zu)", j->in[iq].path, a->T, camdelta_chunk_strategy_name(o->strategy),
                     o->chunk_size);
  int rc = cli_job_output(j, "y", cli_npy_type_of(a->dtype), 4, bnhd);
  if (rc) return rc;
  const camdelta_stream_args sa = {.B = a->B, .H = a->H, .D = a->D, .Hs = a->Hs, .Ws = a->Ws, .pt = a->pt,
                                   .ph = a->ph, .pw = a->pw, .chunk_size = o->chunk_size, .strategy = o->strategy,
                                   .k_scale = a->k_scale, .norm_eps = a->norm_eps, .dtype = a->dtype,
                                   .algorithm = a->algorithm, .conv_weight = a->conv_weight,
                                   .q_norm_weight = a->q_norm_weight, .k_norm_weight = a->k_norm_weight};
  camdelta_stream *s = NULL;
  camdelta_status st = camdelta_stream_create(j->ctx, &sa, &s);
  const size_t S = a->Hs * a->Ws, C = a->H * a->D, most = o->chunk_size + 1, fs = S * C;
  const size_t es = camdelta_dtype_size(a->dtype), act = a->B * most * fs * es;
  const size_t bytes[7] = {act, act, act, a->B * most * 80, a->B * a->H * most * S * 4, a->B * a->H * most * 4, act};
  camdelta_buffer blk[7];
  memset(blk, 0, sizeof blk);
  for (int i = 0; i < 7 && !st; i++) {
    cl_int err;
    blk[i].mem = clCreateBuffer(camdelta_context_cl_context(j->ctx), CL_MEM_READ_WRITE, bytes[i], NULL, &err);
    if (err != CL_SUCCESS) st = CAMDELTA_ERROR_OUT_OF_MEMORY;
  }
  const cli_stream_seq q = {.B = a->B, .H = a->H, .T = a->T, .S = S, .C = C, .es = es,
                            .in = {a->q_raw, a->k_raw, a->v_raw, a->camera_conditions, a->beta, a->decay,
                                   cli_job_out(j, "y")}};
  camdelta_profile prof = {0, 0};
  if (!st) st = cli_stream_run(j->ctx, s, &q, (unsigned)o->repeat, blk, &prof, NULL, 0);
  if (!st) st = camdelta_finish(j->ctx);
  char detail[320];
  snprintf(detail, sizeof detail, "B=%zu H=%zu D=%zu grid %zux%zux%zu, stream of %zu blocks (%s, chunk size %zu), "
           "%zu non-committing steps per block, %s", a->B, a->H, a->D, a->T, a->Hs, a->Ws, blocks,
           camdelta_chunk_strategy_name(o->strategy), o->chunk_size, o->repeat, camdelta_dtype_name(a->dtype));
  rc = cli_job_finish(j, st, "camdelta_stream_step", &prof, detail);
  for (int i = 0; i < 7; i++)
    if (blk[i].mem) clReleaseMemObject(blk[i].mem);
  camdelta_stream_destroy(s);
  return rc;
}

static int run_branch(cli_job *j, const br_opts *o) {
  const int backward = o->op == BR_BACKWARD;
  if (!o->have_grid) return cli_error(CLI_EXIT_USAGE, "run %s: missing --grid T,Hs,Ws", o->c.op_name);
  int iq, ik, iv, iw, iqw, ikw, icc, ib, id, igy = -1, rc;
  const camdelta_dtype dt = o->dtype;
  const camdelta_npy_type at = cli_npy_type_of(dt);
  if ((rc = load_act(j, dt, "q_raw", -4, NULL, "(B, N, H, D)", &iq))) return rc;
  const size_t *s = j->in[iq].npy.shape, B = s[0], N = s[1], H = s[2], D = s[3];
  if ((rc = check_grid(o, N, j->in[iq].path))) return rc;
  /* S divides N and H*D the element count of the file just read: no overflow */
  const size_t T = o->grid[0], S = o->grid[1] * o->grid[2], C = H * D;
  const size_t bnhd[4] = {B, N, H, D}, c4[2] = {C, 4}, c1[1] = {C}, bt20[3] = {B, T, 20}, bhts[4] = {B, H, T, S},
               bht[3] = {B, H, T};
  if ((rc = load_act(j, dt, "k_raw", 4, bnhd, "(B, N, H, D)", &ik)) ||
      (rc = load_act(j, dt, "v_raw", 4, bnhd, "(B, N, H, D)", &iv)) ||
      (rc = load(j, "conv_weight", 2, c4, "(C, 4) with C = H*D", &iw)) ||
      (rc = load(j, "q_norm_weight", 1, c1, "(C,) with C = H*D", &iqw)) ||
      (rc = load(j, "k_norm_weight", 1, c1, "(C,) with C = H*D", &ikw)) ||
      (rc = load(j, "camera_conditions", 3, bt20, "(B, T, 20) with T from --grid", &icc)) ||
      (rc = load(j, "beta", 4, bhts, "(B, H, T, S) with S = Hs*Ws", &ib)) ||
      (rc = load(j, "decay", 3, bht, "(B, H, T)", &id)))
    return rc;
  if (backward && (rc = load_act(j, dt, "grad_y", 4, bnhd, "(B, N, H, D)", &igy))) return rc;
  camdelta_chunking ch;
  if ((rc = chunking_of(j, o, T, &ch))) return rc;
  if (D < 8 || D > 128 || D % 8)
    return cli_error(CLI_EXIT_INPUT, "%s: head dim D = %zu unsupported (expected a multiple of 8 in [8, 128])",
                     j->in[iq].path, D);
  const double k_scale = o->c.have_k_scale ? o->c.k_scale : 1.0 / sqrt((double)D * (double)S);
  if ((rc = cli_job_start(j))) return rc;
  camdelta_branch_args a;
  memset(&a, 0, sizeof a);
  a.B = B, a.T = T, a.Hs = o->grid[1], a.Ws = o->grid[2], a.H = H, a.D = D;
  a.pt = o->patch[0], a.ph = o->patch[1], a.pw = o->patch[2];
  a.chunking = ch;
  a.k_scale = (float)k_scale, a.norm_eps = (float)o->c.norm_eps;
  a.algorithm = o->c.algorithm;
  a.dtype = dt;
  a.q_raw = cli_job_in(j, iq), a.k_raw = cli_job_in(j, ik), a.v_raw = cli_job_in(j, iv);
  a.conv_weight = cli_job_in(j, iw);
  a.q_norm_weight = cli_job_in(j, iqw), a.k_norm_weight = cli_job_in(j, ikw), a.camera_conditions = cli_job_in(j, icc);
  a.beta = cli_job_in(j, ib), a.decay = cli_job_in(j, id);
  camdelta_profile prof = {0, 0};
  char detail[320], cs[96];
  chunk_str(cs, sizeof cs, &ch);
  snprintf(detail, sizeof detail, "B=%zu H=%zu D=%zu grid %zux%zux%zu, %s, k_scale=%g, %s", B, H, D, T, o->grid[1],
           o->grid[2], cs, k_scale, camdelta_dtype_name(dt));
  if (o->stream) return run_stream(j, o, &a, iq, bnhd);
  if (!backward) {
    if ((rc = cli_job_output(j, "y", at, 4, bnhd))) return rc;
    a.y = cli_job_out(j, "y");
    a.profile = &prof;
    return cli_job_finish(j, camdelta_branch_forward(j->ctx, &a, NULL), "camdelta_branch_forward", &prof, detail);
  }
  if ((rc = cli_job_output(j, "dq_raw", at, 4, bnhd)) || (rc = cli_job_output(j, "dk_raw", at, 4, bnhd)) ||
      (rc = cli_job_output(j, "dv_raw", at, 4, bnhd)) || (rc = add_output(j, "dconv_weight", 2, c4)) ||
      (rc = add_output(j, "dq_norm_weight", 1, c1)) || (rc = add_output(j, "dk_norm_weight", 1, c1)) ||
      (rc = add_output(j, "dbeta", 4, bhts)) || (rc = add_output(j, "ddecay", 3, bht)))
    return rc;
  camdelta_branch_grads g = {.grad_y = cli_job_in(j, igy),
                             .dq_raw = cli_job_out(j, "dq_raw"),
                             .dk_raw = cli_job_out(j, "dk_raw"),
                             .dv_raw = cli_job_out(j, "dv_raw"),
                             .dconv_weight = cli_job_out(j, "dconv_weight"),
                             .dq_norm_weight = cli_job_out(j, "dq_norm_weight"),
                             .dk_norm_weight = cli_job_out(j, "dk_norm_weight"),
                             .dbeta = cli_job_out(j, "dbeta"),
                             .ddecay = cli_job_out(j, "ddecay"),
                             .profile = &prof};
  return cli_job_finish(j, camdelta_branch_backward(j->ctx, &a, &g, NULL), "camdelta_branch_backward", &prof, detail);
}

/* ------------------------------------------------------------------------------------------ options */

int cmd_run_branch(int argc, char **argv) {
  br_opts o;
  memset(&o, 0, sizeof o);
  cli_run_opts_init(&o.c);
  o.patch[0] = o.patch[1] = o.patch[2] = 1;
  cli_args a = {argc, argv, 0};
  while (a.i < a.argc) {
    const char *arg = a.argv[a.i], *v = NULL;
    int r = cli_run_option(&a, &o.c); /* --help: the usage of run printed */
    if (r == CLI_OPT_TAKEN) continue;
    if (r != CLI_OPT_OTHER) return r == CLI_OPT_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    if ((r = cli_value(&a, "--grid", &v))) {
      if (r < 0 || !cli_parse_sizes("--grid", v, 3, o.grid, "T,Hs,Ws")) return CLI_EXIT_USAGE;
      o.have_grid = 1;
      continue;
    }
    if ((r = cli_value(&a, "--patch", &v))) {
      if (r < 0 || !cli_parse_patch(v, o.patch)) return CLI_EXIT_USAGE;
      o.have_patch = 1;
      continue;
    }
    if ((r = cli_value(&a, "--head-dim", &v))) {
      if (r < 0 || !cli_parse_size("--head-dim", v, &o.head_dim)) return CLI_EXIT_USAGE;
      continue;
    }
    if ((r = cli_value(&a, "--chunk-size", &v))) {
      if (r < 0 || !cli_parse_size("--chunk-size", v, &o.chunk_size)) return CLI_EXIT_USAGE;
      continue;
    }
    if (strcmp(arg, "--stream") == 0) {
      o.stream = 1, a.i++;
      continue;
    }
    if ((r = cli_value(&a, "--repeat", &v))) {
      if (r < 0 || !cli_parse_count("--repeat", v, 0, 1000000, &o.repeat)) return CLI_EXIT_USAGE;
      o.have_repeat = 1;
      continue;
    }
    if ((r = cli_value(&a, "--dtype", &v))) {
      if (r < 0 || cli_parse_dtype("run", v, &o.dtype)) return CLI_EXIT_USAGE;
      o.have_dtype = 1;
      continue;
    }
    if ((r = cli_value(&a, "--chunk-strategy", &v))) {
      if (r < 0 || !cli_parse_strategy(v, &o.strategy)) return CLI_EXIT_USAGE;
      o.have_strategy = 1;
      continue;
    }
    if (!cli_run_operand(&a, &o.c)) return CLI_EXIT_USAGE;
  }
  if (!o.c.op_name || !op_of(o.c.op_name, &o.op)) return cli_error(CLI_EXIT_USAGE, "run: unknown operation");
  if (!o.c.in || !*o.c.in) return cli_error(CLI_EXIT_USAGE, "run %s: missing --in DIR", o.c.op_name);
  if (!o.c.out || !*o.c.out) return cli_error(CLI_EXIT_USAGE, "run %s: missing --out DIR", o.c.op_name);
  const int branch = o.op == BR_BRANCH || o.op == BR_BACKWARD;
  if ((o.c.have_k_scale || o.c.have_norm_eps || o.c.have_algorithm) && !branch)
    return cli_error(CLI_EXIT_USAGE, "run %s: --k-scale, --norm-eps and --algorithm apply to branch and "
                     "branch-backward only", o.c.op_name);
  if ((o.chunk_size || o.have_strategy) && o.op != BR_CONV && !branch)
    return cli_error(CLI_EXIT_USAGE, "run %s: the chunk options apply to short-conv, branch and branch-backward",
                     o.c.op_name);
  if (o.head_dim && o.op != BR_CAMERA)
    return cli_error(CLI_EXIT_USAGE, "run %s: --head-dim applies to camera only (D comes from the files)", o.c.op_name);
  if (o.have_dtype && !branch)
    return cli_error(CLI_EXIT_USAGE, "run %s: --dtype applies to branch and branch-backward only", o.c.op_name);
  if (o.have_grid && o.op == BR_OT)
    return cli_error(CLI_EXIT_USAGE, "run output-transform: --grid does not apply (N comes from the files)");
  if (o.have_patch && o.op != BR_CAMERA && !branch)
    return cli_error(CLI_EXIT_USAGE, "run %s: --patch applies to camera, branch and branch-backward only",
                     o.c.op_name);
  if (o.stream && o.op != BR_BRANCH)
    return cli_error(CLI_EXIT_USAGE, "run %s: --stream applies to branch only", o.c.op_name);
  if (o.have_repeat && !o.stream) return cli_error(CLI_EXIT_USAGE, "run %s: --repeat needs --stream", o.c.op_name);
  if (o.stream && !o.chunk_size)
    return cli_error(CLI_EXIT_USAGE, "run branch --stream: missing --chunk-size (the stream's blocks)");
  cli_job *j = cli_job_new(&o.c);
  if (!j) return cli_error(CLI_EXIT_FAILURE, "out of host memory");
  int rc;
  switch (o.op) {
    case BR_CAMERA: rc = run_camera(j, &o); break;
    case BR_CONV: rc = run_conv(j, &o); break;
    case BR_OT: rc = run_ot(j); break;
    default: rc = run_branch(j, &o); break;
  }
  cli_job_free(j);
  return rc;
}
