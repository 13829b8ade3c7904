/* camdelta run OP --in DIR --out DIR: one operation on .npy files (docs/math.md §7). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_job.h"
#include "cli_packed.h"
#include "cli_sp.h"

typedef enum run_op { OP_PREP, OP_SCAN, OP_SCAN_BACKWARD, OP_PREP_BACKWARD } run_op;

typedef struct run_opts {
  cli_run_opts c; /* --in --out --device --k-scale --norm-eps --algorithm --quiet */
  run_op op;
  size_t tokens_per_frame;
  int reverse, final_state, all_grads;
  int have_precision;
  camdelta_precision precision;
} run_opts;

static const char *symbols_str(char *buf, size_t size, const char *symbols, int ndim, const size_t *shape) {
  char nums[256];
  snprintf(buf, size, "%s = %s", symbols, cli_shape_str(nums, sizeof nums, ndim, shape));
  return buf;
}

/* Load DIR/NAME.npy into the next input slot and check its shape. *idx gets
 * the slot (the tensor's `present` says whether an optional one was there). */
static int load(cli_job *j, const char *name, int optional, int ndim, const size_t *shape, const char *symbols,
                int *idx) {
  int rc = cli_job_slot(j, 0, idx);
  if (rc) return rc;
  cli_tensor *t = &j->in[*idx];
  char expect[512];
  symbols_str(expect, sizeof expect, symbols, ndim, shape);
  if ((rc = cli_tensor_load(t, j->opts->in, name, optional, expect))) return rc;
  if (!t->present) return CLI_EXIT_OK;
  return cli_tensor_expect(t, ndim, shape, symbols);
}

/* Load the first file of an operation: its shape defines the sizes. */
static int load_primary(cli_job *j, const char *name, const char *symbols, int *idx) {
  int rc = cli_job_slot(j, 0, idx);
  if (rc) return rc;
  cli_tensor *t = &j->in[*idx];
  if ((rc = cli_tensor_load(t, j->opts->in, name, 0, symbols))) return rc;
  if (t->npy.ndim != 4) {
    char have[256];
    return cli_error(CLI_EXIT_INPUT, "%s: shape %s does not fit: expected 4 dimensions %s", t->path,
                     cli_shape_str(have, sizeof have, t->npy.ndim, t->npy.shape), symbols);
  }
  return CLI_EXIT_OK;
}

/* ------------------------------------------------------------------- prep */

static int run_prep(cli_job *j, const run_opts *o) {
  const int backward = o->op == OP_PREP_BACKWARD;
  int iq, ik, iv, iqw, ikw, ipq, ipkv, irc, irs, igq = -1, igk = -1, igv = -1, igi = -1, rc;
  if ((rc = load_primary(j, "q_raw", "(B, N, H, D)", &iq))) return rc;
  const size_t *s = j->in[iq].npy.shape;
  const size_t B = s[0], N = s[1], H = s[2], D = s[3];
  if (D % 2 != 0)
    return cli_error(CLI_EXIT_INPUT, "%s: head dim D = %zu must be even (a multiple of 8 from 8 to 128)",
                     j->in[iq].path, D);
  if (H && D > SIZE_MAX / H) return cli_error(CLI_EXIT_INPUT, "%s: H*D overflows size_t", j->in[iq].path);
  const size_t C = H * D, Dh = D / 2;
  const size_t bnhd[4] = {B, N, H, D}, c1[1] = {C}, bn44[4] = {B, N, 4, 4}, ndh[2] = {N, Dh};
  const size_t bhdn[4] = {B, H, D, N}, bhn[3] = {B, H, N};
  if ((rc = load(j, "k_raw", 0, 4, bnhd, "(B, N, H, D)", &ik))) return rc;
  if ((rc = load(j, "v_raw", 0, 4, bnhd, "(B, N, H, D)", &iv))) return rc;
  if ((rc = load(j, "q_norm_weight", 0, 1, c1, "(C,) with C = H*D", &iqw))) return rc;
  if ((rc = load(j, "k_norm_weight", 0, 1, c1, "(C,) with C = H*D", &ikw))) return rc;
  if ((rc = load(j, "proj_q", 0, 4, bn44, "(B, N, 4, 4)", &ipq))) return rc;
  if ((rc = load(j, "proj_kv", 0, 4, bn44, "(B, N, 4, 4)", &ipkv))) return rc;
  if ((rc = load(j, "rope_cos", 0, 2, ndh, "(N, D/2)", &irc))) return rc;
  if ((rc = load(j, "rope_sin", 0, 2, ndh, "(N, D/2)", &irs))) return rc;
  if (backward) {
    if ((rc = load(j, "grad_q", 1, 4, bhdn, "(B, H, D, N)", &igq))) return rc;
    if ((rc = load(j, "grad_k", 1, 4, bhdn, "(B, H, D, N)", &igk))) return rc;
    if ((rc = load(j, "grad_v", 1, 4, bhdn, "(B, H, D, N)", &igv))) return rc;
    if ((rc = load(j, "grad_inflation_sq", 1, 3, bhn, "(B, H, N)", &igi))) return rc;
  }

  /* q_raw, k_raw, v_raw all <f2: the f16 path; anything else runs in f32 (exact for <f2 inputs). */
  int f16 = j->in[iq].npy.type == CAMDELTA_NPY_F2 && j->in[ik].npy.type == CAMDELTA_NPY_F2 &&
            j->in[iv].npy.type == CAMDELTA_NPY_F2;
  camdelta_npy_type data_type = f16 ? CAMDELTA_NPY_F2 : CAMDELTA_NPY_F4;
  for (int i = 0; i < j->n_in; i++) {
    int is_data = i == iq || i == ik || i == iv || i == igq || i == igk || i == igv;
    if ((rc = cli_tensor_convert(&j->in[i], is_data ? data_type : CAMDELTA_NPY_F4))) return rc;
  }

  double k_scale = o->c.k_scale;
  if (!o->c.have_k_scale) {
    k_scale = D ? 1.0 / sqrt((double)D) : 1.0;
    if (o->tokens_per_frame) {
      if (N % o->tokens_per_frame != 0)
        return cli_error(CLI_EXIT_INPUT, "--tokens-per-frame %zu does not divide N = %zu (from %s)",
                         o->tokens_per_frame, N, j->in[iq].path);
      k_scale /= sqrt((double)o->tokens_per_frame);
    }
  }

  if ((rc = cli_job_start(j))) return rc;
  camdelta_profile prof = {0, 0};
  camdelta_status st;
  char detail[256];
  snprintf(detail, sizeof detail, "B=%zu N=%zu H=%zu D=%zu %s k_scale=%g norm_eps=%g", B, N, H, D,
           f16 ? "f16" : "f32", k_scale, o->c.norm_eps);
  /* the shape, scalars, forward inputs and profile, which prep's forward and backward arguments name alike */
#define PREP_INPUTS(a)                                                                                 \
  do {                                                                                                 \
    memset(&(a), 0, sizeof(a));                                                                        \
    (a).B = B, (a).N = N, (a).H = H, (a).D = D;                                                        \
    (a).dtype = f16 ? CAMDELTA_F16 : CAMDELTA_F32;                                                     \
    (a).k_scale = (float)k_scale, (a).norm_eps = (float)o->c.norm_eps;                                 \
    (a).q_raw = cli_job_in(j, iq), (a).k_raw = cli_job_in(j, ik), (a).v_raw = cli_job_in(j, iv);       \
    (a).q_norm_weight = cli_job_in(j, iqw), (a).k_norm_weight = cli_job_in(j, ikw);                    \
    (a).proj_q = cli_job_in(j, ipq), (a).proj_kv = cli_job_in(j, ipkv);                                \
    (a).rope_cos = cli_job_in(j, irc), (a).rope_sin = cli_job_in(j, irs);                              \
    (a).profile = &prof;                                                                               \
  } while (0)
  if (!backward) {
    const cli_output_spec outs[] = {{"q", data_type, 4, bhdn}, {"k", data_type, 4, bhdn}, {"v", data_type, 4, bhdn},
                                    {"inflation_sq", CAMDELTA_NPY_F4, 3, bhn}};
    if ((rc = CLI_JOB_OUTPUTS(j, outs))) return rc;
    camdelta_prep_args a;
    PREP_INPUTS(a);
    a.q = cli_job_out(j, "q"), a.k = cli_job_out(j, "k"), a.v = cli_job_out(j, "v");
    a.inflation_sq = cli_job_out(j, "inflation_sq");
    st = camdelta_prep_forward(j->ctx, &a, NULL);
    return cli_job_finish(j, st, "camdelta_prep_forward", &prof, detail);
  }
  const cli_output_spec outs[] = {
      {"dq_raw", data_type, 4, bnhd},           {"dk_raw", data_type, 4, bnhd},
      {"dv_raw", data_type, 4, bnhd},           {"dq_norm_weight", CAMDELTA_NPY_F4, 1, c1},
      {"dk_norm_weight", CAMDELTA_NPY_F4, 1, c1}, /* with --all-grads: */
      {"dproj_q", CAMDELTA_NPY_F4, 4, bn44},    {"dproj_kv", CAMDELTA_NPY_F4, 4, bn44},
      {"drope_cos", CAMDELTA_NPY_F4, 2, ndh},   {"drope_sin", CAMDELTA_NPY_F4, 2, ndh}};
  if ((rc = cli_job_outputs(j, o->all_grads ? 9 : 5, outs))) return rc;
  camdelta_prep_backward_args a;
  PREP_INPUTS(a);
  a.grad_q = cli_job_in(j, igq), a.grad_k = cli_job_in(j, igk), a.grad_v = cli_job_in(j, igv);
  a.grad_inflation_sq = cli_job_in(j, igi);
  a.dq_raw = cli_job_out(j, "dq_raw"), a.dk_raw = cli_job_out(j, "dk_raw"), a.dv_raw = cli_job_out(j, "dv_raw");
  a.dq_norm_weight = cli_job_out(j, "dq_norm_weight"), a.dk_norm_weight = cli_job_out(j, "dk_norm_weight");
  a.dproj_q = cli_job_out(j, "dproj_q"), a.dproj_kv = cli_job_out(j, "dproj_kv"); /* with --all-grads */
  a.drope_cos = cli_job_out(j, "drope_cos"), a.drope_sin = cli_job_out(j, "drope_sin");
#undef PREP_INPUTS
  st = camdelta_prep_backward(j->ctx, &a, NULL);
  return cli_job_finish(j, st, "camdelta_prep_backward", &prof, detail);
}

/* ------------------------------------------------------------------- scan */

static int run_scan(cli_job *j, const run_opts *o) {
  const int backward = o->op == OP_SCAN_BACKWARD;
  int iq, ik, iv, ib, idc, iinit, igo = -1, igf = -1, rc;
  if ((rc = load_primary(j, "q", "(B, H, D, N)", &iq))) return rc;
  const size_t *s = j->in[iq].npy.shape;
  const size_t B = s[0], H = s[1], D = s[2], N = s[3];
  if ((rc = load_primary(j, "beta", "(B, H, F, S)", &ib))) return rc;
  const size_t *bs = j->in[ib].npy.shape;
  const size_t F = bs[2], S = bs[3];
  if (bs[0] != B || bs[1] != H || (S ? F > N / S || F * S != N : N != 0)) {
    char have[256];
    return cli_error(CLI_EXIT_INPUT, "%s: shape %s does not fit: expected (B, H, F, S) with B = %zu, H = %zu and "
                     "F*S = N = %zu (from %s)", j->in[ib].path,
                     cli_shape_str(have, sizeof have, 4, bs), B, H, N, j->in[iq].path);
  }
  const size_t bhdn[4] = {B, H, D, N}, bhf[3] = {B, H, F}, bhdd[4] = {B, H, D, D}, bhfs[4] = {B, H, F, S};
  if ((rc = load(j, "k", 0, 4, bhdn, "(B, H, D, N)", &ik))) return rc;
  if ((rc = load(j, "v", 0, 4, bhdn, "(B, H, D, N)", &iv))) return rc;
  if ((rc = load(j, "decay", 0, 3, bhf, "(B, H, F)", &idc))) return rc;
  if (backward && (rc = load(j, "grad_out", 0, 4, bhdn, "(B, H, D, N)", &igo))) return rc;
  if ((rc = load(j, "init_state", 1, 4, bhdd, "(B, H, D, D)", &iinit))) return rc;
  if (backward && (rc = load(j, "grad_final_state", 1, 4, bhdd, "(B, H, D, D)", &igf))) return rc;
  for (int i = 0; i < j->n_in; i++)
    if ((rc = cli_tensor_convert(&j->in[i], CAMDELTA_NPY_F4))) return rc;
  const int has_init = j->in[iinit].present;

  if ((rc = cli_job_start(j))) return rc;
  camdelta_profile prof = {0, 0};
  camdelta_status st;
  char detail[256];
  if (!backward) {
    if ((rc = cli_job_output(j, "out", CAMDELTA_NPY_F4, 4, bhdn))) return rc;
    if (o->final_state && (rc = cli_job_output(j, "final_state", CAMDELTA_NPY_F4, 4, bhdd))) return rc;
    camdelta_scan_algorithm used = o->c.algorithm;
    camdelta_scan_args a;
    memset(&a, 0, sizeof a);
    a.B = B, a.H = H, a.D = D, a.F = F, a.S = S;
    a.reverse = o->reverse;
    a.algorithm = o->c.algorithm;
    a.q = cli_job_in(j, iq), a.k = cli_job_in(j, ik), a.v = cli_job_in(j, iv);
    a.beta = cli_job_in(j, ib), a.decay = cli_job_in(j, idc), a.init_state = cli_job_in(j, iinit);
    a.out = cli_job_out(j, "out"), a.final_state = cli_job_out(j, "final_state"); /* with --final-state */
    a.profile = &prof;
    a.used = &used;
    a.precision = o->precision;
    st = camdelta_scan_forward(j->ctx, &a, NULL);
    snprintf(detail, sizeof detail, "B=%zu H=%zu D=%zu F=%zu S=%zu %s%s, %s algorithm", B, H, D, F, S,
             o->reverse ? "reverse" : "causal", has_init ? " from init_state" : "",
             st == CAMDELTA_OK ? camdelta_scan_algorithm_name(used) : "?");
    return cli_job_finish(j, st, "camdelta_scan_forward", &prof, detail);
  }
  const cli_output_spec outs[] = {{"dq", CAMDELTA_NPY_F4, 4, bhdn},    {"dk", CAMDELTA_NPY_F4, 4, bhdn},
                                  {"dv", CAMDELTA_NPY_F4, 4, bhdn},    {"dbeta", CAMDELTA_NPY_F4, 4, bhfs},
                                  {"ddecay", CAMDELTA_NPY_F4, 3, bhf}, {"dinit_state", CAMDELTA_NPY_F4, 4, bhdd}};
  if ((rc = cli_job_outputs(j, has_init ? 6 : 5, outs))) return rc; /* dinit_state with init_state */
  camdelta_scan_backward_args a;
  memset(&a, 0, sizeof a);
  a.B = B, a.H = H, a.D = D, a.F = F, a.S = S;
  a.reverse = o->reverse;
  a.q = cli_job_in(j, iq), a.k = cli_job_in(j, ik), a.v = cli_job_in(j, iv);
  a.beta = cli_job_in(j, ib), a.decay = cli_job_in(j, idc), a.init_state = cli_job_in(j, iinit);
  a.grad_out = cli_job_in(j, igo), a.grad_final_state = cli_job_in(j, igf);
  a.dq = cli_job_out(j, "dq"), a.dk = cli_job_out(j, "dk"), a.dv = cli_job_out(j, "dv");
  a.dbeta = cli_job_out(j, "dbeta"), a.ddecay = cli_job_out(j, "ddecay");
  a.dinit_state = cli_job_out(j, "dinit_state"); /* with init_state */
  a.profile = &prof;
  a.precision = o->precision;
  st = camdelta_scan_backward(j->ctx, &a, NULL);
  snprintf(detail, sizeof detail, "B=%zu H=%zu D=%zu F=%zu S=%zu %s%s%s", B, H, D, F, S,
           o->reverse ? "reverse" : "causal", has_init ? " from init_state" : "",
           j->in[igf].present ? " with grad_final_state" : "");
  return cli_job_finish(j, st, "camdelta_scan_backward", &prof, detail);
}

/* ------------------------------------------------------------- arguments */

static int parse_op(const char *name, run_op *op) {
  if (strcmp(name, "prep") == 0) *op = OP_PREP;
  else if (strcmp(name, "scan") == 0) *op = OP_SCAN;
  else if (strcmp(name, "scan-backward") == 0) *op = OP_SCAN_BACKWARD;
  else if (strcmp(name, "prep-backward") == 0) *op = OP_PREP_BACKWARD;
  else return 0;
  return 1;
}

/* An option that does not apply to the operation is a usage error. */
static int only_for(const run_opts *o, const char *opt, int ok) {
  if (ok) return CLI_EXIT_OK;
  return cli_error(CLI_EXIT_USAGE, "run %s: option %s does not apply to this operation (see 'camdelta help run')",
                   o->c.op_name, opt);
}

int cmd_run(int argc, char **argv) {
  if (cli_sp_requested(argc, argv)) return cmd_run_sp(argc, argv); /* tools/cmd_run_sp.c */
  if (cli_is_branch_run(argc, argv)) return cmd_run_branch(argc, argv);
  run_opts o;
  memset(&o, 0, sizeof o);
  cli_run_opts_init(&o.c);
  cli_args a = {argc, argv, 0};
  while (a.i < a.argc) {
    const char *v = NULL;
    int r = cli_run_option(&a, &o.c); /* --help: the usage of run printed */
    if (r == CLI_OPT_TAKEN) continue;
    if (r != CLI_OPT_OTHER) return r == CLI_OPT_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    if ((r = cli_value(&a, "--tokens-per-frame", &v))) {
      if (r < 0 || !cli_parse_size("--tokens-per-frame", v, &o.tokens_per_frame)) return CLI_EXIT_USAGE;
      continue;
    }
    if ((r = cli_value(&a, "--precision", &v))) {
      if (r < 0 || !cli_parse_precision(v, &o.precision)) return CLI_EXIT_USAGE;
      o.have_precision = 1;
      continue;
    }
    if (cli_flag(&a, "--reverse")) {
      o.reverse = 1;
      continue;
    }
    if (cli_flag(&a, "--final-state")) {
      o.final_state = 1;
      continue;
    }
    if (cli_flag(&a, "--all-grads")) {
      o.all_grads = 1;
      continue;
    }
    if (!cli_run_operand(&a, &o.c)) return CLI_EXIT_USAGE;
  }
  if (!o.c.op_name)
    return cli_error(CLI_EXIT_USAGE, "run: missing the operation: prep, scan, scan-backward, prep-backward, camera, "
                     "short-conv, output-transform, branch or branch-backward");
  if (!parse_op(o.c.op_name, &o.op))
    return cli_error(CLI_EXIT_USAGE,
                     "run: unknown operation '%s' (expected prep, scan, scan-backward, prep-backward, camera, "
                     "short-conv, output-transform, branch or branch-backward)", o.c.op_name);
  if (!o.c.in || !*o.c.in) return cli_error(CLI_EXIT_USAGE, "run %s: missing --in DIR", o.c.op_name);
  if (!o.c.out || !*o.c.out) return cli_error(CLI_EXIT_USAGE, "run %s: missing --out DIR", o.c.op_name);

  const int is_prep = o.op == OP_PREP || o.op == OP_PREP_BACKWARD, is_scan = !is_prep;
  int rc;
  if ((o.c.have_k_scale && (rc = only_for(&o, "--k-scale", is_prep))) ||
      (o.tokens_per_frame && (rc = only_for(&o, "--tokens-per-frame", is_prep))) ||
      (o.c.have_norm_eps && (rc = only_for(&o, "--norm-eps", is_prep))) ||
      (o.reverse && (rc = only_for(&o, "--reverse", is_scan))) ||
      (o.c.have_algorithm && (rc = only_for(&o, "--algorithm", o.op == OP_SCAN))) ||
      (o.have_precision && (rc = only_for(&o, "--precision", is_scan))) ||
      (o.final_state && (rc = only_for(&o, "--final-state", o.op == OP_SCAN))) ||
      (o.all_grads && (rc = only_for(&o, "--all-grads", o.op == OP_PREP_BACKWARD))))
    return rc;

  if (is_scan && cli_packed_requested(o.c.in)) /* packed clips: tools/cmd_run_packed.c */
    return cmd_run_packed(o.op == OP_SCAN_BACKWARD, o.c.in, o.c.out, o.c.device, o.reverse, o.c.algorithm,
                          o.final_state, o.c.quiet);
  cli_job *j = cli_job_new(&o.c);
  if (!j) return cli_error(CLI_EXIT_FAILURE, "out of host memory");
  rc = is_prep ? run_prep(j, &o) : run_scan(j, &o);
  cli_job_free(j);
  return rc;
}
