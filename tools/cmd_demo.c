/* camdelta demo — the main job: a synthetic camera-controlled clip through
 * the whole forward (prep, causal scan, reverse scan) and backward on the
 * default device, every output checked against the f64 reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"

void usage_demo(void) {
  printf("usage: camdelta demo [--shape B,H,D,F,S] [--device SEL] [--seed N]\n"
         "\n"
         "A camera orbits a point over F frames; each token of a frame's S = h x w grid\n"
         "gets proj_kv = P^-1 and proj_q = P^T of its frame's pose P, RoPE angles from\n"
         "its (frame, row, column) position, and Q/K/V from random projections of random\n"
         "features. Runs prep, the causal and the reverse scan, their backward passes,\n"
         "and checks every output against the f64 C reference (SPEC section 5 bounds).\n"
         "Default shape 1,2,32,4,64. Exit status 0 when every check passes, 5 when a\n"
         "check fails.\n");
}

typedef struct demo {
  size_t B, H, D, F, S, N, C, Dh;
  float k_scale, eps;
  float *raw[3], *qw, *kw, *pq, *pkv, *rc, *rs; /* prep inputs */
  float *beta, *decay, *gscan[2], *ginfl;        /* scan gates and upstream grads */
} demo;

static unsigned long long rng = 88172645463325252ull;
static double unif(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2 * log(unif() + 1e-300)) * cos(6.283185307179586 * unif()); }

static float *alloc_f(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static double *to64(const float *x, size_t n) {
  double *d = malloc((n ? n : 1) * sizeof *d);
  for (size_t i = 0; i < n && d; i++) d[i] = x[i];
  return d;
}

/* Camera-to-world pose of frame f on an orbit of radius 3 around the origin,
 * looking at it: rows of R are the camera axes in world coordinates. */
static void orbit_pose(size_t f, size_t F, float P[16]) {
  double a = 0.6 * (double)f / (double)(F > 1 ? F - 1 : 1) - 0.3, r = 3.0, h = 0.4;
  double c[3] = {r * sin(a), h, -r * cos(a)};          /* camera centre */
  double z[3] = {-c[0], -c[1], -c[2]};                 /* forward: towards the origin */
  double n = sqrt(z[0] * z[0] + z[1] * z[1] + z[2] * z[2]);
  for (int i = 0; i < 3; i++) z[i] /= n;
  double up[3] = {0, 1, 0}, x[3] = {up[1] * z[2] - up[2] * z[1], up[2] * z[0] - up[0] * z[2], up[0] * z[1] - up[1] * z[0]};
  n = sqrt(x[0] * x[0] + x[1] * x[1] + x[2] * x[2]);
  for (int i = 0; i < 3; i++) x[i] /= n;
  double y[3] = {z[1] * x[2] - z[2] * x[1], z[2] * x[0] - z[0] * x[2], z[0] * x[1] - z[1] * x[0]};
  /* camera-to-world: columns are the camera axes, last column the centre */
  for (int i = 0; i < 3; i++) {
    P[4 * i + 0] = (float)x[i], P[4 * i + 1] = (float)y[i], P[4 * i + 2] = (float)z[i], P[4 * i + 3] = (float)c[i];
  }
  P[12] = P[13] = P[14] = 0, P[15] = 1;
}

static int build_problem(demo *d) {
  const size_t B = d->B, N = d->N, H = d->H, D = d->D, C = d->C, Dh = d->Dh, F = d->F, S = d->S;
  size_t gh = 1;
  for (size_t i = 1; i * i <= S; i++)
    if (S % i == 0) gh = i;
  const size_t gw = S / gh;
  /* Q/K/V: random projections (Cin -> C) of random token features */
  const size_t Cin = 16;
  float *x = alloc_f(B * N * Cin), *W = alloc_f(3 * Cin * C);
  for (size_t i = 0; i < B * N * Cin; i++) x[i] = (float)gauss();
  for (size_t i = 0; i < 3 * Cin * C; i++) W[i] = (float)(gauss() / sqrt((double)Cin));
  for (int t = 0; t < 3; t++) {
    d->raw[t] = alloc_f(B * N * C);
    for (size_t bn = 0; bn < B * N; bn++)
      for (size_t c = 0; c < C; c++) {
        double acc = 0;
        for (size_t i = 0; i < Cin; i++) acc += (double)x[bn * Cin + i] * W[(t * Cin + i) * C + c];
        d->raw[t][bn * C + c] = (float)acc;
      }
  }
  free(x), free(W);
  d->qw = alloc_f(C), d->kw = alloc_f(C);
  for (size_t c = 0; c < C; c++) d->qw[c] = (float)(0.8 + 0.4 * unif()), d->kw[c] = (float)(0.8 + 0.4 * unif());
  /* cameras: proj_q = P^T, proj_kv = P^-1 per token of the frame */
  d->pq = alloc_f(B * N * 16), d->pkv = alloc_f(B * N * 16);
  float *poses = alloc_f(F * 16), *inv = alloc_f(F * 16);
  for (size_t f = 0; f < F; f++) orbit_pose(f, F, poses + 16 * f);
  if (camdelta_invert_se3(F, poses, inv)) return cli_lib_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "demo");
  for (size_t b = 0; b < B; b++)
    for (size_t n = 0; n < N; n++) {
      const float *P = poses + 16 * (n / S), *Pi = inv + 16 * (n / S);
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
          d->pq[(b * N + n) * 16 + 4 * i + j] = P[4 * j + i];
          d->pkv[(b * N + n) * 16 + 4 * i + j] = Pi[4 * i + j];
        }
    }
  free(poses), free(inv);
  /* RoPE: Dh/2 frequencies split over (frame, row, column) */
  float *freqs = alloc_f(N * Dh);
  const size_t pairs = Dh / 2;
  for (size_t n = 0; n < N; n++) {
    const double pos[3] = {(double)(n / S), (double)((n % S) / gw), (double)((n % S) % gw)};
    for (size_t i = 0; i < pairs; i++) {
      const size_t axis = i % 3, k = i / 3;
      const double theta = pos[axis] * pow(100.0, -2.0 * (double)k / (double)(pairs / 3 + 1));
      freqs[2 * (n * pairs + i)] = (float)cos(theta), freqs[2 * (n * pairs + i) + 1] = (float)sin(theta);
    }
  }
  d->rc = alloc_f(N * Dh), d->rs = alloc_f(N * Dh);
  camdelta_status st = camdelta_rope_tables(N, Dh, freqs, d->rc, d->rs);
  free(freqs);
  if (st) return cli_lib_error(st, "demo: rope tables");
  /* gates and upstream gradients */
  const size_t BHN = B * H * N, BHDN = BHN * D;
  d->beta = alloc_f(BHN), d->decay = alloc_f(B * H * F), d->ginfl = alloc_f(BHN);
  for (size_t i = 0; i < BHN; i++) d->beta[i] = (float)(1.0 / (1.0 + exp(-gauss()))), d->ginfl[i] = (float)gauss();
  for (size_t i = 0; i < B * H * F; i++) d->decay[i] = (float)(0.85 + 0.15 * unif());
  for (int s = 0; s < 2; s++) {
    d->gscan[s] = alloc_f(BHDN);
    for (size_t i = 0; i < BHDN; i++) d->gscan[s][i] = (float)gauss();
  }
  return CLI_EXIT_OK;
}

static void free_problem(demo *d) {
  for (int t = 0; t < 3; t++) free(d->raw[t]);
  free(d->qw), free(d->kw), free(d->pq), free(d->pkv), free(d->rc), free(d->rs);
  free(d->beta), free(d->decay), free(d->ginfl), free(d->gscan[0]), free(d->gscan[1]);
}

/* ------------------------------------------------------------- device side */
typedef struct dbuf {
  cl_mem m;
  size_t n;
} dbuf;

static camdelta_context *g_ctx;

static int up(dbuf *b, const float *h, size_t n) {
  cl_int err;
  b->n = n;
  b->m = clCreateBuffer(camdelta_context_cl_context(g_ctx), CL_MEM_READ_WRITE | (h ? CL_MEM_COPY_HOST_PTR : 0),
                        (n ? n : 1) * 4, (void *)h, &err);
  return err == CL_SUCCESS ? 0 : cli_error(CLI_EXIT_DEVICE, "allocating: %s", camdelta_cl_error_name(err));
}

static float *down(const dbuf *b) {
  float *h = alloc_f(b->n);
  if (clEnqueueReadBuffer(camdelta_context_queue(g_ctx), b->m, CL_TRUE, 0, b->n * 4, h, 0, NULL, NULL) != CL_SUCCESS) {
    free(h);
    return NULL;
  }
  return h;
}

static double rel_err(const float *x, const double *ref, size_t n) {
  double mr = 0, md = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(x[i])) return INFINITY;
    if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    if (fabs(x[i] - ref[i]) > md) md = fabs(x[i] - ref[i]);
  }
  return md / (mr > 1e-30 ? mr : 1e-30);
}

typedef struct check {
  const char *stage, *name;
  double err, bound;
} check;

static check checks[64];
static int nchecks;

static void record(const char *stage, const char *name, const dbuf *got, const double *ref, double bound) {
  float *h = down(got);
  checks[nchecks].stage = stage, checks[nchecks].name = name, checks[nchecks].bound = bound;
  checks[nchecks].err = h ? rel_err(h, ref, got->n) : INFINITY;
  nchecks++;
  free(h);
}

int cmd_demo(int argc, char **argv) {
  cli_args a = {argc, argv, 0};
  const char *device = NULL, *v;
  demo d;
  memset(&d, 0, sizeof d);
  d.B = 1, d.H = 2, d.D = 32, d.F = 4, d.S = 64;
  while (a.i < argc) {
    int r;
    if ((r = cli_value(&a, "--shape", &v))) {
      unsigned long s[5];
      char tail;
      if (r < 0) return CLI_EXIT_USAGE;
      if (sscanf(v, "%lu,%lu,%lu,%lu,%lu%c", &s[0], &s[1], &s[2], &s[3], &s[4], &tail) != 5 || !s[0] || !s[1] ||
          !s[3] || !s[4] || s[2] % 8 || s[2] < 8 || s[2] > 128)
        return cli_error(CLI_EXIT_USAGE, "demo: --shape wants B,H,D,F,S with D a multiple of 8 in [8,128] (got '%s')",
                         v);
      d.B = s[0], d.H = s[1], d.D = s[2], d.F = s[3], d.S = s[4];
    } else if ((r = cli_value(&a, "--device", &device))) {
      if (r < 0) return CLI_EXIT_USAGE;
    } else if ((r = cli_value(&a, "--seed", &v))) {
      size_t seed;
      if (r < 0 || !cli_parse_size("--seed", v, &seed)) return CLI_EXIT_USAGE;
      rng ^= (unsigned long long)seed * 0x9E3779B97F4A7C15ull;
    } else if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
      usage_demo();
      return CLI_EXIT_OK;
    } else {
      return cli_error(CLI_EXIT_USAGE, "demo: unknown option '%s' (see 'camdelta help demo')", argv[a.i]);
    }
  }
  d.N = d.F * d.S, d.C = d.H * d.D, d.Dh = d.D / 2;
  d.k_scale = (float)(1.0 / sqrt((double)d.D * (double)d.S)), d.eps = 1e-6f;
  int rc = build_problem(&d);
  if (rc) return rc;
  rc = cli_context(&g_ctx, device);
  if (rc) {
    free_problem(&d);
    return rc;
  }
  camdelta_device_info info;
  camdelta_context_info(g_ctx, &info);
  printf("camdelta demo %s\n", camdelta_version_string());
  printf("device   %s (%s, %s)\n", info.device_name, info.platform_name, info.driver_version);
  printf("shape    B=%zu H=%zu D=%zu F=%zu S=%zu (N=%zu tokens), f32, camera orbit over %zu frames\n\n", d.B, d.H, d.D,
         d.F, d.S, d.N, d.F);

  const size_t B = d.B, N = d.N, H = d.H, D = d.D, F = d.F, S = d.S, BNHD = B * N * H * D, BHN = B * H * N;
  dbuf raw[3], qw, kw, pq, pkv, rc_, rs, q, k, v_, infl, beta, decay, out[2], gout[2], dq[2], dk[2], dv[2], db[2],
      dd[2], gq, gk, gv, gi, dqr, dkr, dvr, dqw, dkw;
  for (int t = 0; t < 3; t++) rc = rc ? rc : up(&raw[t], d.raw[t], BNHD);
  rc = rc ? rc : up(&qw, d.qw, H * D);
  rc = rc ? rc : up(&kw, d.kw, H * D);
  rc = rc ? rc : up(&pq, d.pq, B * N * 16);
  rc = rc ? rc : up(&pkv, d.pkv, B * N * 16);
  rc = rc ? rc : up(&rc_, d.rc, N * d.Dh);
  rc = rc ? rc : up(&rs, d.rs, N * d.Dh);
  rc = rc ? rc : up(&q, NULL, BNHD);
  rc = rc ? rc : up(&k, NULL, BNHD);
  rc = rc ? rc : up(&v_, NULL, BNHD);
  rc = rc ? rc : up(&infl, NULL, BHN);
  rc = rc ? rc : up(&beta, d.beta, BHN);
  rc = rc ? rc : up(&decay, d.decay, B * H * F);
  for (int s = 0; s < 2; s++) {
    rc = rc ? rc : up(&out[s], NULL, BNHD);
    rc = rc ? rc : up(&gout[s], d.gscan[s], BNHD);
    rc = rc ? rc : up(&dq[s], NULL, BNHD);
    rc = rc ? rc : up(&dk[s], NULL, BNHD);
    rc = rc ? rc : up(&dv[s], NULL, BNHD);
    rc = rc ? rc : up(&db[s], NULL, BHN);
    rc = rc ? rc : up(&dd[s], NULL, B * H * F);
  }
  rc = rc ? rc : up(&gq, NULL, BNHD);
  rc = rc ? rc : up(&gk, NULL, BNHD);
  rc = rc ? rc : up(&gv, NULL, BNHD);
  rc = rc ? rc : up(&gi, d.ginfl, BHN);
  rc = rc ? rc : up(&dqr, NULL, BNHD);
  rc = rc ? rc : up(&dkr, NULL, BNHD);
  rc = rc ? rc : up(&dvr, NULL, BNHD);
  rc = rc ? rc : up(&dqw, NULL, H * D);
  rc = rc ? rc : up(&dkw, NULL, H * D);
  if (rc) return rc;

  camdelta_prep_saved *psaved = NULL;
  camdelta_scan_saved *ssaved[2] = {NULL, NULL};
  camdelta_status st = camdelta_prep_saved_create(g_ctx, &psaved);
  for (int s = 0; s < 2 && !st; s++) st = camdelta_scan_saved_create(g_ctx, &ssaved[s]);
  double t_prep = 0, t_scan[2] = {0, 0}, t_sbwd[2] = {0, 0}, t_pbwd = 0;
  camdelta_scan_algorithm used[2] = {CAMDELTA_SCAN_AUTO, CAMDELTA_SCAN_AUTO};
  const char *failed_stage = NULL;

  /* forward: prep */
  camdelta_profile prof = {0, 0};
  if (!st) {
    camdelta_prep_args pa = {B, N, H, D, CAMDELTA_F32, d.k_scale, d.eps, {raw[0].m, 0}, {raw[1].m, 0}, {raw[2].m, 0},
                             {qw.m, 0}, {kw.m, 0}, {pq.m, 0}, {pkv.m, 0}, {rc_.m, 0}, {rs.m, 0}, {q.m, 0}, {k.m, 0},
                             {v_.m, 0}, {infl.m, 0}, &prof};
    st = camdelta_prep_forward(g_ctx, &pa, psaved);
    t_prep = prof.kernel_ms;
    if (st) failed_stage = "prep forward";
  }
  /* forward: causal and reverse scan on the prep outputs */
  for (int s = 0; s < 2 && !st; s++) {
    prof.kernel_ms = 0;
    camdelta_scan_args sa = {B, H, D, F, S, s, CAMDELTA_SCAN_AUTO, {q.m, 0}, {k.m, 0}, {v_.m, 0}, {beta.m, 0},
                             {decay.m, 0}, {out[s].m, 0}, {NULL, 0}, {NULL, 0}, &prof, &used[s], CAMDELTA_PRECISION_EXACT};
    st = camdelta_scan_forward(g_ctx, &sa, ssaved[s]);
    t_scan[s] = prof.kernel_ms;
    if (st) failed_stage = s ? "reverse scan forward" : "causal scan forward";
  }
  /* backward: both scans, then prep with the summed q/k/v gradients */
  for (int s = 0; s < 2 && !st; s++) {
    prof.kernel_ms = 0;
    camdelta_scan_backward_args ba;
    memset(&ba, 0, sizeof ba);
    ba.B = B, ba.H = H, ba.D = D, ba.F = F, ba.S = S, ba.reverse = s;
    ba.q.mem = q.m, ba.k.mem = k.m, ba.v.mem = v_.m, ba.beta.mem = beta.m, ba.decay.mem = decay.m;
    ba.grad_out.mem = gout[s].m, ba.dq.mem = dq[s].m, ba.dk.mem = dk[s].m, ba.dv.mem = dv[s].m;
    ba.dbeta.mem = db[s].m, ba.ddecay.mem = dd[s].m, ba.profile = &prof;
    st = camdelta_scan_backward(g_ctx, &ba, ssaved[s]);
    t_sbwd[s] = prof.kernel_ms;
    if (st) failed_stage = s ? "reverse scan backward" : "causal scan backward";
  }
  float *hq[2] = {NULL, NULL}, *hk[2] = {NULL, NULL}, *hv[2] = {NULL, NULL};
  float *sq = alloc_f(BNHD), *sk = alloc_f(BNHD), *sv = alloc_f(BNHD);
  if (!st) {
    for (int s = 0; s < 2; s++) hq[s] = down(&dq[s]), hk[s] = down(&dk[s]), hv[s] = down(&dv[s]);
    for (size_t i = 0; i < BNHD; i++)
      sq[i] = hq[0][i] + hq[1][i], sk[i] = hk[0][i] + hk[1][i], sv[i] = hv[0][i] + hv[1][i];
    clEnqueueWriteBuffer(camdelta_context_queue(g_ctx), gq.m, CL_TRUE, 0, BNHD * 4, sq, 0, NULL, NULL);
    clEnqueueWriteBuffer(camdelta_context_queue(g_ctx), gk.m, CL_TRUE, 0, BNHD * 4, sk, 0, NULL, NULL);
    clEnqueueWriteBuffer(camdelta_context_queue(g_ctx), gv.m, CL_TRUE, 0, BNHD * 4, sv, 0, NULL, NULL);
    prof.kernel_ms = 0;
    camdelta_prep_backward_args pb;
    memset(&pb, 0, sizeof pb);
    pb.B = B, pb.N = N, pb.H = H, pb.D = D, pb.dtype = CAMDELTA_F32, pb.k_scale = d.k_scale, pb.norm_eps = d.eps;
    pb.q_raw.mem = raw[0].m, pb.k_raw.mem = raw[1].m, pb.v_raw.mem = raw[2].m, pb.q_norm_weight.mem = qw.m;
    pb.k_norm_weight.mem = kw.m, pb.proj_q.mem = pq.m, pb.proj_kv.mem = pkv.m, pb.rope_cos.mem = rc_.m;
    pb.rope_sin.mem = rs.m, pb.grad_q.mem = gq.m, pb.grad_k.mem = gk.m, pb.grad_v.mem = gv.m;
    pb.grad_inflation_sq.mem = gi.m, pb.dq_raw.mem = dqr.m, pb.dk_raw.mem = dkr.m, pb.dv_raw.mem = dvr.m;
    pb.dq_norm_weight.mem = dqw.m, pb.dk_norm_weight.mem = dkw.m, pb.profile = &prof;
    st = camdelta_prep_backward(g_ctx, &pb, psaved);
    t_pbwd = prof.kernel_ms;
    if (st) failed_stage = "prep backward";
  }
  int exit_code = 0;
  if (st) {
    exit_code = cli_lib_error(st, failed_stage);
  } else {
    /* f64 reference of every stage, fed with the device's inputs to that stage */
    double *in64[9] = {to64(d.raw[0], BNHD), to64(d.raw[1], BNHD), to64(d.raw[2], BNHD), to64(d.qw, H * D),
                       to64(d.kw, H * D), to64(d.pq, B * N * 16), to64(d.pkv, B * N * 16), to64(d.rc, N * d.Dh),
                       to64(d.rs, N * d.Dh)};
    double *rq = malloc(BNHD * 8), *rk = malloc(BNHD * 8), *rv = malloc(BNHD * 8), *ri = malloc(BHN * 8);
    camdelta_ref_prep rp = {B, N, H, D, d.k_scale, d.eps, in64[0], in64[1], in64[2], in64[3], in64[4], in64[5],
                            in64[6], in64[7], in64[8], rq, rk, rv, ri};
    camdelta_ref_prep_forward(&rp);
    record("prep forward", "q", &q, rq, 1e-6);
    record("prep forward", "k", &k, rk, 1e-6);
    record("prep forward", "v", &v_, rv, 1e-6);
    record("prep forward", "inflation_sq", &infl, ri, 1e-6);
    float *fq = down(&q), *fk = down(&k), *fv = down(&v_);
    double *q64 = to64(fq, BNHD), *k64 = to64(fk, BNHD), *v64 = to64(fv, BNHD), *b64 = to64(d.beta, BHN),
           *d64 = to64(d.decay, B * H * F);
    double *ro = malloc(BNHD * 8), *rdq = malloc(BNHD * 8), *rdk = malloc(BNHD * 8), *rdv = malloc(BNHD * 8),
           *rdb = malloc(BHN * 8), *rdd = malloc(B * H * F * 8);
    static const char *sname[2] = {"causal scan", "reverse scan"};
    static const char *bname[2] = {"causal scan backward", "reverse scan backward"};
    for (int s = 0; s < 2; s++) {
      camdelta_ref_scan rs_ = {B, H, D, F, S, s, q64, k64, v64, b64, d64, NULL, ro, NULL, NULL, NULL};
      camdelta_ref_scan_forward(&rs_);
      record(sname[s], "out", &out[s], ro, 1e-5);
      double *g64 = to64(d.gscan[s], BNHD);
      camdelta_ref_scan_grads rg = {g64, NULL, rdq, rdk, rdv, rdb, rdd, NULL};
      camdelta_ref_scan_backward(&rs_, &rg);
      record(bname[s], "dq", &dq[s], rdq, 1e-4);
      record(bname[s], "dk", &dk[s], rdk, 1e-4);
      record(bname[s], "dv", &dv[s], rdv, 1e-4);
      record(bname[s], "dbeta", &db[s], rdb, 1e-4);
      record(bname[s], "ddecay", &dd[s], rdd, 1e-4);
      free(g64);
    }
    double *gq64 = to64(sq, BNHD), *gk64 = to64(sk, BNHD), *gv64 = to64(sv, BNHD), *gi64 = to64(d.ginfl, BHN);
    double *rdqr = malloc(BNHD * 8), *rdkr = malloc(BNHD * 8), *rdvr = malloc(BNHD * 8), *rdqw = malloc(H * D * 8),
           *rdkw = malloc(H * D * 8);
    camdelta_ref_prep_grads pg = {gq64, gk64, gv64, gi64, rdqr, rdkr, rdvr, rdqw, rdkw, NULL, NULL, NULL, NULL};
    camdelta_ref_prep_backward(&rp, &pg);
    record("prep backward", "dq_raw", &dqr, rdqr, 1e-4);
    record("prep backward", "dk_raw", &dkr, rdkr, 1e-4);
    record("prep backward", "dv_raw", &dvr, rdvr, 1e-4);
    record("prep backward", "dq_norm_weight", &dqw, rdqw, 1e-4);
    record("prep backward", "dk_norm_weight", &dkw, rdkw, 1e-4);
    for (int i = 0; i < 9; i++) free(in64[i]);
    free(rq), free(rk), free(rv), free(ri), free(fq), free(fk), free(fv), free(q64), free(k64), free(v64), free(b64);
    free(d64), free(ro), free(rdq), free(rdk), free(rdv), free(rdb), free(rdd), free(gq64), free(gk64), free(gv64);
    free(gi64), free(rdqr), free(rdkr), free(rdvr), free(rdqw), free(rdkw);

    printf("%-26s %10s   %s\n", "stage", "kernel ms", "largest relative error vs the f64 reference");
    const char *stages[6] = {"prep forward", "causal scan", "reverse scan", "causal scan backward",
                             "reverse scan backward", "prep backward"};
    const double times[6] = {t_prep, t_scan[0], t_scan[1], t_sbwd[0], t_sbwd[1], t_pbwd};
    int pass = 1;
    for (int s = 0; s < 6; s++) {
      char label[64];
      if (s == 1 || s == 2) snprintf(label, sizeof label, "%s (%s)", stages[s], camdelta_scan_algorithm_name(used[s - 1]));
      else snprintf(label, sizeof label, "%s", stages[s]);
      printf("%-26s %10.3f  ", label, times[s]);
      int first = 1;
      for (int c = 0; c < nchecks; c++) {
        if (strcmp(checks[c].stage, stages[s]) != 0) continue;
        int ok = checks[c].err <= checks[c].bound;
        pass &= ok;
        printf("%s %s %.1e%s", first ? "" : ",", checks[c].name, checks[c].err, ok ? "" : " FAIL");
        first = 0;
      }
      printf("\n");
    }
    printf("\nresult   %s: %d outputs checked against the f64 reference (bounds: prep 1e-6, scan 1e-5, "
           "gradients 1e-4)\n",
           pass ? "PASS" : "FAIL", nchecks);
    if (!pass) exit_code = 5;
  }
  free(sq), free(sk), free(sv);
  for (int s = 0; s < 2; s++) free(hq[s]), free(hk[s]), free(hv[s]);
  camdelta_prep_saved_destroy(psaved);
  for (int s = 0; s < 2; s++) camdelta_scan_saved_destroy(ssaved[s]);
  dbuf *all[] = {&raw[0], &raw[1], &raw[2], &qw, &kw, &pq, &pkv, &rc_, &rs, &q, &k, &v_, &infl, &beta, &decay,
                 &out[0], &out[1], &gout[0], &gout[1], &dq[0], &dq[1], &dk[0], &dk[1], &dv[0], &dv[1], &db[0],
                 &db[1], &dd[0], &dd[1], &gq, &gk, &gv, &gi, &dqr, &dkr, &dvr, &dqw, &dkw};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) clReleaseMemObject(all[i]->m);
  camdelta_context_destroy(g_ctx);
  free_problem(&d);
  return exit_code;
}
