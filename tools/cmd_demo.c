/* camdelta demo — the main job: a camera trajectory (an orbit, then a dolly with a zoom) becomes per-token
 * matrices and RoPE tables on the device, and the whole camera branch (short conv on K, prep, beta discount,
 * causal + chunk-masked reverse scan, output transform) runs forward and backward on the default device; every
 * output is checked against the f64 C reference, with a short report. No globals: one demo_state owns every
 * host and device resource and demo_free releases them all. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"
#include "cli_sp.h"
#include "cli_stream.h"
#include "usage.h"

typedef struct demo_opts {
  size_t B, H, D, F, S, Hs, Ws, cs;
  camdelta_chunk_strategy strategy;
  unsigned long long seed;
  const char *device;
} demo_opts;

enum { IQ, IK, IV, IW, IQW, IKW, ICC, IBETA, IDECAY, IGY, NIN };
enum { CIN_FEATURES = 16 }; /* token features projected to Q, K and V */
enum { OPQ, OPKV, OPO, ORC, ORS, OKCONV, OY, ODQ, ODK, ODV, ODW, ODQW, ODKW, ODB, ODD, NOUT };
static const char *const out_names[NOUT] = {"proj_q", "proj_kv", "proj_o", "rope_cos", "rope_sin",
                                             "k_conv", "y",       "dq_raw", "dk_raw",   "dv_raw",
                                             "dconv_weight", "dq_norm_weight", "dk_norm_weight", "dbeta", "ddecay"};

typedef struct demo_state {
  demo_opts o;
  size_t N, C, count[NIN], out_count[NOUT];
  float *in[NIN];
  camdelta_context *ctx;
  cl_mem din[NIN], dout[NOUT];
  double ms[4]; /* cameras, short conv, branch forward, branch backward */
  int host_ms;  /* ms are host times around camdelta_finish (the driver gives no kernel times) */
  double err[NOUT];
  unsigned long long rng;
} demo_state;

static double unif(demo_state *s) {
  s->rng ^= s->rng << 13, s->rng ^= s->rng >> 7, s->rng ^= s->rng << 17;
  return (double)(s->rng >> 11) / 9007199254740992.0;
}
static double gauss(demo_state *s) { return sqrt(-2 * log(unif(s) + 1e-300)) * cos(6.283185307179586 * unif(s)); }

static double *to64(const float *x, size_t n) {
  double *d = malloc((n ? n : 1) * sizeof *d);
  for (size_t i = 0; i < n && d; i++) d[i] = x[i];
  return d;
}

/* ------------------------------------------------------------------------------------------ options */

static int parse_opts(int argc, char **argv, demo_opts *o, int *done) {
  cli_args a = {argc, argv, 0};
  const char *v;
  *done = 0;
  memset(o, 0, sizeof *o);
  cli_shape sh = {.name = NULL, .B = 1, .H = 2, .D = 32, .F = 6, .S = 48}; /* cli_shape.h's strict parser */
  o->cs = 2;
  o->strategy = CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE;
  o->seed = 88172645463325252ull;
  while (a.i < argc) {
    int r;
    if ((r = cli_demo_option(&a, &sh, &o->strategy, &o->device, &o->seed))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--chunk-size", &v))) {
      if (r < 0 || !cli_parse_size("--chunk-size", v, &o->cs)) return CLI_EXIT_USAGE;
    } else {
      *done = cli_help_or_unknown(&a, "demo", "demo", usage_demo);
      return *done ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    }
  }
  o->B = sh.B, o->H = sh.H, o->D = sh.D, o->F = sh.F, o->S = sh.S;
  cli_grid_of(o->S, &o->Hs, &o->Ws); /* the most square grid Hs x Ws = S (Hs <= Ws) */
  return CLI_EXIT_OK;
}

/* ------------------------------------------------------------------------------------- the problem */

enum { PATCH = 16 }; /* image pixels per token along each axis */

/* camera_conditions of frame f: c2w (camera axes as columns, centre as last column) and fx fy cx cy in pixels.
 * Frames [0, F/2): an orbit of radius 3 around the origin at height 0.4, looking at it; then a dolly along the
 * last view direction from radius 3 to 1.5 while the focal length grows by a third (a zoom). */
static void trajectory(const demo_opts *o, size_t f, float *cc) {
  const size_t half = o->F / 2 > 0 ? o->F / 2 : 1;
  const double a_end = 0.3;
  double a, r;
  if (f < half) a = -0.3 + 0.6 * (double)f / (double)(half > 1 ? half - 1 : 1), r = 3.0;
  else a = a_end, r = 3.0 - 1.5 * (double)(f - half + 1) / (double)(o->F - half);
  const double c[3] = {r * sin(a), 0.4, -r * cos(a)};
  cli_look_at_origin(c, 0, cc);
  const double W = (double)(o->Ws * PATCH), Hh = (double)(o->Hs * PATCH);
  const double zoom = f < half ? 1.0 : 1.0 + (double)(f - half + 1) / (3.0 * (double)(o->F - half));
  cc[16] = (float)(0.9 * W * zoom), cc[17] = (float)(0.9 * W * zoom), cc[18] = (float)(W / 2), cc[19] = (float)(Hh / 2);
}

/* Every input's and output's element count (s->count, s->out_count), each product checked, and what the demo
 * allocates: the inputs and outputs on the device, the inputs as f32 and f64 and the references as f64 on the
 * host (an input error, exit 3, when that cannot fit; the device is checked once s->ctx is made). */
static int plan_sizes(demo_state *s) {
  const demo_opts *o = &s->o;
  const size_t B = o->B, H = o->H, D = o->D, F = o->F;
  int ok = camdelta_size_mul(&s->N, F, o->S) && camdelta_size_mul(&s->C, H, D);
  const size_t N = s->N, C = s->C;
  const size_t in_f[NIN][4] = {{B, N, C, 1}, {B, N, C, 1}, {B, N, C, 1}, {4, C, 1, 1}, {C, 1, 1, 1},
                               {C, 1, 1, 1}, {B, F, 20, 1}, {B, H, N, 1}, {B, H, F, 1}, {B, N, C, 1}};
  const size_t out_f[NOUT][4] = {{B, N, 16, 1}, {B, N, 16, 1}, {B, N, 16, 1}, {N, D / 2, 1, 1}, {N, D / 2, 1, 1},
                                 {B, N, C, 1},  {B, N, C, 1},  {B, N, C, 1},  {B, N, C, 1},     {B, N, C, 1},
                                 {4, C, 1, 1},  {C, 1, 1, 1},  {C, 1, 1, 1},  {B, H, N, 1},     {B, H, F, 1}};
  cli_budget bud = {0, 0, 0, 0};
  for (int i = 0; i < NIN && ok; i++) {
    ok = camdelta_size_prod(&s->count[i], 4, in_f[i]);
    cli_budget_device(&bud, 1, s->count[i], 4);
    cli_budget_host(&bud, 1, s->count[i], 4 + 8);
  }
  for (int i = 0; i < NOUT && ok; i++) {
    ok = camdelta_size_prod(&s->out_count[i], 4, out_f[i]);
    cli_budget_device(&bud, 1, s->out_count[i], 4);
    cli_budget_host(&bud, 1, s->out_count[i], 8);
  }
  cli_budget_host(&bud, 3, CIN_FEATURES, C * 4); /* the random projections */
  if (!ok) bud.overflow = 1;
  return cli_budget_check(&bud, s->ctx, "demo: this shape");
}

static int build_inputs(demo_state *s) {
  const demo_opts *o = &s->o;
  const size_t B = o->B, N = s->N, C = s->C, F = o->F, *cnt = s->count, BNC = cnt[IQ];
  for (int i = 0; i < NIN; i++)
    if (!(s->in[i] = calloc(cnt[i] ? cnt[i] : 1, sizeof(float))))
      return cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  /* Q/K/V: random projections (CIN_FEATURES -> C) of random token features */
  enum { CIN = CIN_FEATURES };
  float *W = malloc(3 * CIN * C * sizeof *W), x[CIN];
  if (!W) return cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  for (size_t i = 0; i < 3 * CIN * C; i++) W[i] = (float)(gauss(s) / sqrt((double)CIN));
  for (size_t bn = 0; bn < B * N; bn++) {
    for (int i = 0; i < CIN; i++) x[i] = (float)gauss(s);
    for (int t = 0; t < 3; t++)
      for (size_t c = 0; c < C; c++) {
        double acc = 0;
        for (int i = 0; i < CIN; i++) acc += (double)x[i] * W[(t * CIN + i) * C + c];
        s->in[IQ + t][bn * C + c] = (float)acc;
      }
  }
  free(W);
  for (size_t i = 0; i < 4 * C; i++) s->in[IW][i] = (float)(0.3 * gauss(s));
  for (size_t c = 0; c < C; c++)
    s->in[IQW][c] = (float)(0.8 + 0.4 * unif(s)), s->in[IKW][c] = (float)(0.8 + 0.4 * unif(s));
  for (size_t b = 0; b < B; b++)
    for (size_t f = 0; f < F; f++) trajectory(o, f, s->in[ICC] + (b * F + f) * 20);
  for (size_t i = 0; i < cnt[IBETA]; i++) s->in[IBETA][i] = (float)(1.0 / (1.0 + exp(-gauss(s))));
  for (size_t i = 0; i < cnt[IDECAY]; i++) s->in[IDECAY][i] = (float)(0.85 + 0.15 * unif(s));
  for (size_t i = 0; i < BNC; i++) s->in[IGY][i] = (float)gauss(s);
  return CLI_EXIT_OK;
}

/* ------------------------------------------------------------------------------------- device side */

static int upload_all(demo_state *s) {
  cl_int err = CL_SUCCESS;
  for (int i = 0; i < NIN && err == CL_SUCCESS; i++)
    s->din[i] = clCreateBuffer(camdelta_context_cl_context(s->ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                               s->count[i] * 4, s->in[i], &err);
  for (int i = 0; i < NOUT && err == CL_SUCCESS; i++)
    s->dout[i] = clCreateBuffer(camdelta_context_cl_context(s->ctx), CL_MEM_READ_WRITE, s->out_count[i] * 4, NULL,
                                &err);
  return err == CL_SUCCESS ? CLI_EXIT_OK
                           : cli_error(CLI_EXIT_DEVICE, "demo: allocating device memory: %s", camdelta_cl_error_name(err));
}

static camdelta_buffer din(const demo_state *s, int i) { return (camdelta_buffer){s->din[i], 0}; }
static camdelta_buffer dout(const demo_state *s, int i) { return (camdelta_buffer){s->dout[i], 0}; }

/* Room for the chunk bounds of F frames (F + 1 entries; F <= CLI_MAX_TOKENS, so no product wraps). */
static size_t *bounds_array(size_t F) { return calloc(F + 1, sizeof(size_t)); }

static camdelta_chunking chunking_of(const demo_opts *o) {
  const camdelta_chunking ch = {o->cs, o->strategy, NULL, 0};
  return ch;
}

static camdelta_branch_args branch_args(const demo_state *s, camdelta_profile *prof) {
  const demo_opts *o = &s->o;
  camdelta_branch_args a;
  memset(&a, 0, sizeof a);
  a.B = o->B, a.T = o->F, a.Hs = o->Hs, a.Ws = o->Ws, a.H = o->H, a.D = o->D;
  a.pt = 1, a.ph = PATCH, a.pw = PATCH;
  a.chunking = chunking_of(o);
  a.k_scale = (float)(1.0 / sqrt((double)o->D * (double)o->S));
  a.norm_eps = 1e-6f;
  a.algorithm = CAMDELTA_SCAN_AUTO;
  a.q_raw = din(s, IQ), a.k_raw = din(s, IK), a.v_raw = din(s, IV), a.conv_weight = din(s, IW);
  a.q_norm_weight = din(s, IQW), a.k_norm_weight = din(s, IKW), a.camera_conditions = din(s, ICC);
  a.beta = din(s, IBETA), a.decay = din(s, IDECAY), a.y = dout(s, OY);
  a.profile = prof;
  return a;
}

/* A stage's time: its kernels' (prof), or where the driver gives none (kernel_ms NaN: the first stage finds out, the
 * later ones request no profile) the host clock from t0 to camdelta_finish. */
static camdelta_status stage_time(demo_state *s, camdelta_status st, const camdelta_profile *prof, double t0,
                                  double *ms) {
  if (st) return st;
  if (!s->host_ms && !isnan(prof->kernel_ms)) {
    *ms = prof->kernel_ms;
    return CAMDELTA_OK;
  }
  s->host_ms = 1;
  st = camdelta_finish(s->ctx);
  *ms = cli_now_ms() - t0;
  return st;
}

/* Cameras, the short conv on its own (for its check), then the branch forward and backward. */
static camdelta_status run_device(demo_state *s, const char **stage) {
  const demo_opts *o = &s->o;
  camdelta_profile prof = {0, 0};
  const camdelta_camera_args ca = {.B = o->B, .T = o->F, .Hs = o->Hs, .Ws = o->Ws, .pt = 1, .ph = PATCH, .pw = PATCH,
                                   .D = o->D, .camera_conditions = din(s, ICC), .proj_q = dout(s, OPQ),
                                   .proj_kv = dout(s, OPKV), .proj_o = dout(s, OPO), .rope_cos = dout(s, ORC),
                                   .rope_sin = dout(s, ORS), .profile = &prof};
  *stage = "cameras";
  camdelta_status st = camdelta_finish(s->ctx);
  double t0 = cli_now_ms();
  if (!st) st = stage_time(s, camdelta_camera_forward(s->ctx, &ca), &prof, t0, &s->ms[0]);
  if (st) return st;
  camdelta_profile *pp = s->host_ms ? NULL : &prof; /* no events where they carry no times */
  const camdelta_short_conv_args sc = {.B = o->B, .T = o->F, .S = o->S, .C = s->C, .chunking = chunking_of(o),
                                       .k_raw = din(s, IK), .conv_weight = din(s, IW), .k_conv = dout(s, OKCONV),
                                       .profile = pp};
  *stage = "short conv";
  t0 = cli_now_ms();
  if ((st = stage_time(s, camdelta_short_conv_forward(s->ctx, &sc), &prof, t0, &s->ms[1]))) return st;
  camdelta_branch_saved *saved = NULL;
  *stage = "branch forward";
  if ((st = camdelta_branch_saved_create(s->ctx, &saved))) return st;
  const camdelta_branch_args a = branch_args(s, pp);
  t0 = cli_now_ms();
  st = stage_time(s, camdelta_branch_forward(s->ctx, &a, saved), &prof, t0, &s->ms[2]);
  if (!st) {
    *stage = "branch backward";
    const camdelta_branch_grads g = {.grad_y = din(s, IGY),          .dq_raw = dout(s, ODQ),
                                     .dk_raw = dout(s, ODK),          .dv_raw = dout(s, ODV),
                                     .dconv_weight = dout(s, ODW),    .dq_norm_weight = dout(s, ODQW),
                                     .dk_norm_weight = dout(s, ODKW), .dbeta = dout(s, ODB),
                                     .ddecay = dout(s, ODD),          .profile = pp};
    t0 = cli_now_ms();
    st = stage_time(s, camdelta_branch_backward(s->ctx, &a, &g, saved), &prof, t0, &s->ms[3]);
  }
  camdelta_branch_saved_destroy(saved);
  if (!st) st = camdelta_finish(s->ctx);
  return st;
}

/* ------------------------------------------------------------------------------------------ checks */

static double rel_err(const float *x, const double *ref, size_t n) {
  double mr = 0, md = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(x[i])) return INFINITY;
    if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    if (fabs(x[i] - ref[i]) > md) md = fabs(x[i] - ref[i]);
  }
  return md / (mr > 1e-30 ? mr : 1e-30);
}

/* err[i] = the device output i against ref[i] (NULL: not checked) */
static int compare(demo_state *s, double *const ref[NOUT]) {
  for (int i = 0; i < NOUT; i++) {
    s->err[i] = INFINITY;
    if (!ref[i]) continue;
    float *h = malloc(s->out_count[i] * sizeof *h);
    if (!h) return cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
    cl_int err = clEnqueueReadBuffer(camdelta_context_queue(s->ctx), s->dout[i], CL_TRUE, 0, s->out_count[i] * 4, h,
                                     0, NULL, NULL);
    if (err != CL_SUCCESS) {
      free(h);
      return cli_error(CLI_EXIT_DEVICE, "demo: reading %s: %s", out_names[i], camdelta_cl_error_name(err));
    }
    s->err[i] = rel_err(h, ref[i], s->out_count[i]);
    free(h);
  }
  return CLI_EXIT_OK;
}

static int check_reference(demo_state *s) {
  const demo_opts *o = &s->o;
  double *ref[NOUT] = {NULL}, *in64[NIN] = {NULL};
  int rc = CLI_EXIT_OK;
  for (int i = 0; i < NIN && !rc; i++)
    if (!(in64[i] = to64(s->in[i], s->count[i]))) rc = cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  for (int i = 0; i < NOUT && !rc; i++)
    if (!(ref[i] = malloc(s->out_count[i] * sizeof(double))))
      rc = cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  camdelta_status st = CAMDELTA_OK;
  if (!rc) {
    const camdelta_ref_camera rcam = {.B = o->B, .T = o->F, .Hs = o->Hs, .Ws = o->Ws, .ph = PATCH, .pw = PATCH,
                                      .D = o->D, .camera_conditions = in64[ICC], .proj_q = ref[OPQ],
                                      .proj_kv = ref[OPKV], .proj_o = ref[OPO], .rope_cos = ref[ORC],
                                      .rope_sin = ref[ORS]};
    st = camdelta_ref_camera_forward(&rcam);
    size_t nb = 0, *b = bounds_array(o->F);
    const camdelta_chunking ch = chunking_of(o);
    if (!b) st = camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (!st) st = camdelta_conv_bounds(o->F, &ch, b, o->F + 1, &nb);
    const camdelta_ref_conv rconv = {.B = o->B, .T = o->F, .S = o->S, .C = s->C, .bounds = b, .nbounds = nb,
                                     .x = in64[IK], .w = in64[IW], .y = ref[OKCONV]};
    if (!st) st = camdelta_ref_short_conv_forward(&rconv);
    const camdelta_branch_args a = branch_args(s, NULL);
    camdelta_ref_branch rb = {.B = o->B, .T = o->F, .Hs = o->Hs, .Ws = o->Ws, .ph = PATCH, .pw = PATCH, .H = o->H,
                              .D = o->D, .chunking = ch, .k_scale = a.k_scale, .norm_eps = a.norm_eps,
                              .q_raw = in64[IQ], .k_raw = in64[IK], .v_raw = in64[IV], .conv_weight = in64[IW],
                              .q_norm_weight = in64[IQW], .k_norm_weight = in64[IKW],
                              .camera_conditions = in64[ICC], .beta = in64[IBETA], .decay = in64[IDECAY],
                              .y = ref[OY]};
    if (!st) st = camdelta_ref_branch_forward(&rb);
    const camdelta_ref_branch_grads rg = {.grad_y = in64[IGY], .dq_raw = ref[ODQ], .dk_raw = ref[ODK],
                                          .dv_raw = ref[ODV], .dconv_weight = ref[ODW], .dq_norm_weight = ref[ODQW],
                                          .dk_norm_weight = ref[ODKW], .dbeta = ref[ODB], .ddecay = ref[ODD]};
    if (!st) st = camdelta_ref_branch_backward(&rb, &rg);
    if (st) rc = cli_lib_error(st, "demo: f64 reference");
    free(b);
  }
  if (!rc) rc = compare(s, ref);
  for (int i = 0; i < NOUT; i++) free(ref[i]);
  for (int i = 0; i < NIN; i++) free(in64[i]);
  return rc;
}

/* ------------------------------------------------------------------------------------------ report */

#define INDENT "                                    "
static int report(const demo_state *s) {
  const demo_opts *o = &s->o;
  size_t nb = 0, ncb = 0, *b = bounds_array(o->F), *cb = bounds_array(o->F);
  const camdelta_chunking ch = chunking_of(o);
  if (b && cb) {
    camdelta_chunk_bounds(o->F, &ch, b, o->F + 1, &nb);
    camdelta_conv_bounds(o->F, &ch, cb, o->F + 1, &ncb);
  }
  printf("chunks   %s, chunk size %zu: scan chunks [", camdelta_chunk_strategy_name(o->strategy), o->cs);
  for (size_t i = 0; i < nb; i++) printf(i ? ", %zu" : "%zu", b[i]);
  printf("], conv segments [");
  for (size_t i = 0; i < ncb; i++) printf(i ? ", %zu" : "%zu", cb[i]);
  printf("]\n\n");
  free(b), free(cb);
  static const struct {
    const char *label;
    int first, last;
    double bound;
  } stages[4] = {{"cameras -> matrices", OPQ, ORS, 1e-6},
                 {"short conv on K", OKCONV, OKCONV, 1e-6},
                 {"branch forward", OY, OY, 1e-5},
                 {"branch backward", ODQ, ODD, 1e-4}};
  printf("%-22s %10s   %s\n", "stage", s->host_ms ? "host ms" : "kernel ms",
         "largest relative error vs the f64 reference");
  int pass = 1, checked = 0;
  for (int st = 0; st < 4; st++) {
    printf("%-22s %10.3f  ", stages[st].label, s->ms[st]);
    for (int i = stages[st].first; i <= stages[st].last; i++) {
      const int ok = s->err[i] <= stages[st].bound;
      pass &= ok;
      checked++;
      printf("%s%s %.1e%s", i == stages[st].first ? " " : (i - stages[st].first) % 4 == 0 ? ",\n" INDENT : ", ",
             out_names[i], s->err[i], ok ? "" : " FAIL");
    }
    printf("\n");
  }
  if (s->host_ms)
    printf("(host ms: the driver gives no kernel times, so each stage of a second run is timed on the host from\n"
           " its call to camdelta_finish, launches and waits included)\n");
  printf("\nresult   %s: %d outputs checked against the f64 reference (bounds: matrices and conv 1e-6, branch forward "
         "1e-5, gradients 1e-4)\n",
         pass ? "PASS" : "FAIL", checked);
  return pass ? CLI_EXIT_OK : 5;
}

static void demo_free(demo_state *s) {
  for (int i = 0; i < NIN; i++) {
    free(s->in[i]);
    if (s->din[i]) clReleaseMemObject(s->din[i]);
  }
  for (int i = 0; i < NOUT; i++)
    if (s->dout[i]) clReleaseMemObject(s->dout[i]);
  if (s->ctx) camdelta_context_destroy(s->ctx);
  free(s);
}

int cmd_demo(int argc, char **argv) {
  if (cli_sp_requested(argc, argv)) return cmd_demo_sp(argc, argv); /* tools/cmd_demo_sp.c */
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--stream") == 0) return cmd_demo_stream(argc, argv); /* tools/cmd_demo_stream.c */
  demo_state *s = calloc(1, sizeof *s);
  if (!s) return cli_error(CLI_EXIT_FAILURE, "demo: out of host memory");
  int done = 0, rc = parse_opts(argc, argv, &s->o, &done);
  const demo_opts *o = &s->o;
  if (!rc && !done) {
    s->rng = o->seed;
    rc = plan_sizes(s); /* the host first (no context yet): a shape the host cannot hold starts no device */
    if (!rc) rc = cli_context(&s->ctx, o->device);
    if (!rc) rc = plan_sizes(s);
    if (!rc) rc = build_inputs(s);
    if (!rc) {
      camdelta_device_info info;
      camdelta_context_info(s->ctx, &info);
      printf("camdelta demo %s\n", camdelta_version_string());
      printf("device   %s (%s, %s)\n", info.device_name, info.platform_name, info.driver_version);
      printf("shape    B=%zu H=%zu D=%zu F=%zu S=%zu as a %zux%zu grid (N=%zu tokens), patch %dx%d px, f32\n", o->B,
             o->H, o->D, o->F, o->S, o->Hs, o->Ws, s->N, PATCH, PATCH);
      printf("cameras  orbit over frames 0-%zu, then a dolly with a 4/3 zoom over frames %zu-%zu\n",
             (o->F / 2 ? o->F / 2 : 1) - 1, o->F / 2 ? o->F / 2 : 1, o->F - 1);
      rc = upload_all(s);
    }
    if (!rc) {
      const char *stage = "";
      camdelta_status st = run_device(s, &stage);
      /* host times include the first calls' kernel builds: time a second run (the same outputs) */
      if (!st && s->host_ms) st = run_device(s, &stage);
      if (st) rc = cli_lib_error(st, stage);
    }
    if (!rc) rc = check_reference(s);
    if (!rc) rc = report(s);
  }
  demo_free(s);
  return rc;
}
