/* Golden plans: what every operation launches (kernel, program options, global and local sizes, local memory),
 * and the scan plans' descriptions, at the benchmark's shapes for three sets of device facts, against the files in
 * tests/golden/. A change of these files is a change of what runs on those devices: it must be meant.
 *   h200   the NVIDIA H200's facts, its tensor-core kernels emulated (the plans the GPU runs)
 *   h100   the same for the H100 80GB HBM3 (its own tile entries, and the gram's for a stream's blocks)
 *   pocl2  PoCL on two CPU cores (the plans CI runs)
 * The operations run dry (src/runtime/emulate.c: plans and kernels are built, nothing is enqueued), so the
 * production shapes cost only the kernels' compilation. CAMDELTA_GOLDEN_UPDATE=DIR writes the files into DIR
 * instead of comparing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camdelta_packed.h"
#include "camdelta_stream.h"
#include "camdelta_summary.h"
#include "runtime/internal.h"
#include "testutil.h"

typedef struct shape {
  const char *name;
  size_t B, H, D, F, S, Hs, Ws;
} shape;

/* camdelta bench's named shapes, with its branch rows' token grids */
static const shape SHAPES[] = {
    {.name = "small", .B = 1, .H = 2, .D = 64, .F = 4, .S = 256, .Hs = 16, .Ws = 16},
    {.name = "d64", .B = 1, .H = 20, .D = 64, .F = 21, .S = 1560, .Hs = 30, .Ws = 52},
    {.name = "sana480", .B = 1, .H = 20, .D = 112, .F = 21, .S = 1560, .Hs = 30, .Ws = 52},
    {.name = "sana720", .B = 1, .H = 20, .D = 112, .F = 21, .S = 3600, .Hs = 45, .Ws = 80},
};

/* The traces are taken on PoCL whatever CAMDELTA_DEVICE says: it allocates buffers lazily (the production shapes'
 * tensors cost nothing untouched) and its kernel facts are those the goldens were made with. */
static camdelta_context *base;

/* Device buffers of the run, released together (PoCL allocates host memory lazily: untouched, they cost nothing). */
typedef struct pool {
  cl_mem mem[256];
  size_t n;
} pool;

static camdelta_buffer buf(pool *p, size_t floats) {
  cl_int err;
  cl_mem m = clCreateBuffer(camdelta_context_cl_context(base), CL_MEM_READ_WRITE, floats * 4, NULL, &err);
  if (err != CL_SUCCESS || p->n == sizeof p->mem / sizeof p->mem[0]) fail_msg("buffer of %zu floats", floats);
  p->mem[p->n++] = m;
  return (camdelta_buffer){.mem = m, .offset = 0};
}

/* A buffer the library reads on the host before it plans (the cameras, checked for infinities): zeros, so that no
 * uninitialised memory decides whether the call goes on. */
static camdelta_buffer buf_zero(pool *p, size_t floats) {
  camdelta_buffer b = buf(p, floats);
  const cl_uint zero = 0;
  cl_command_queue q = camdelta_context_queue(base);
  if (clEnqueueFillBuffer(q, b.mem, &zero, sizeof zero, 0, floats * 4, 0, NULL, NULL) != CL_SUCCESS || clFinish(q))
    fail_msg("zeroing a buffer of %zu floats", floats);
  return b;
}

static void pool_free(pool *p) {
  for (size_t i = 0; i < p->n; i++) clReleaseMemObject(p->mem[i]);
  p->n = 0;
}

#define RUN(ctx, what, expr)                  \
  do {                                        \
    cd_trace_note(ctx, "%s", what);           \
    TU_OK(expr);                              \
  } while (0)

static void describe_scan(camdelta_context *ctx, const camdelta_scan_args *a) {
  char text[2048];
  TU_OK(camdelta_scan_plan_describe(ctx, a, text, sizeof text));
  cd_trace_note(ctx, "  plan: %s", text);
}

static void describe_backward(camdelta_context *ctx, const camdelta_scan_backward_args *a) {
  char text[2048];
  TU_OK(camdelta_scan_backward_plan_describe(ctx, a, text, sizeof text));
  cd_trace_note(ctx, "  plan: %s", text);
}

static void prep_ops(camdelta_context *ctx, pool *p, const shape *s) {
  const size_t N = s->F * s->S, C = s->H * s->D, tok = s->B * N * C, bn16 = s->B * N * 16, rope = N * s->D / 2;
  const camdelta_dtype dtypes[3] = {CAMDELTA_F32, CAMDELTA_F16, CAMDELTA_BF16};
  for (int t = 0; t < 3; t++) {
    camdelta_prep_args a = {
        .B = s->B, .N = N, .H = s->H, .D = s->D, .dtype = dtypes[t], .k_scale = 0.01f, .norm_eps = 1e-6f,
        .q_raw = buf(p, tok), .k_raw = buf(p, tok), .v_raw = buf(p, tok), .q_norm_weight = buf(p, C),
        .k_norm_weight = buf(p, C), .proj_q = buf(p, bn16), .proj_kv = buf(p, bn16), .rope_cos = buf(p, rope),
        .rope_sin = buf(p, rope), .q = buf(p, tok), .k = buf(p, tok), .v = buf(p, tok),
        .inflation_sq = buf(p, s->B * s->H * N)};
    camdelta_prep_saved *saved;
    TU_OK(camdelta_prep_saved_create(ctx, &saved));
    char what[96];
    snprintf(what, sizeof what, "prep forward %s", camdelta_dtype_name(dtypes[t]));
    RUN(ctx, what, camdelta_prep_forward(ctx, &a, saved));
    camdelta_prep_backward_args g = {
        .B = s->B, .N = N, .H = s->H, .D = s->D, .dtype = dtypes[t], .k_scale = 0.01f, .norm_eps = 1e-6f,
        .q_raw = a.q_raw, .k_raw = a.k_raw, .v_raw = a.v_raw, .q_norm_weight = a.q_norm_weight,
        .k_norm_weight = a.k_norm_weight, .proj_q = a.proj_q, .proj_kv = a.proj_kv, .rope_cos = a.rope_cos,
        .rope_sin = a.rope_sin, .grad_q = buf(p, tok), .grad_k = buf(p, tok), .grad_v = buf(p, tok),
        .grad_inflation_sq = buf(p, s->B * s->H * N), .dq_raw = buf(p, tok), .dk_raw = buf(p, tok),
        .dv_raw = buf(p, tok), .dq_norm_weight = buf(p, C), .dk_norm_weight = buf(p, C), .q = a.q, .k = a.k,
        .inflation_sq = a.inflation_sq};
    snprintf(what, sizeof what, "prep backward %s, saved", camdelta_dtype_name(dtypes[t]));
    RUN(ctx, what, camdelta_prep_backward(ctx, &g, saved));
    g.q = g.k = g.inflation_sq = (camdelta_buffer){0};
    snprintf(what, sizeof what, "prep backward %s, recomputed", camdelta_dtype_name(dtypes[t]));
    RUN(ctx, what, camdelta_prep_backward(ctx, &g, NULL));
    if (t == 0) {
      g.dproj_q = buf(p, bn16), g.dproj_kv = buf(p, bn16), g.drope_cos = buf(p, rope), g.drope_sin = buf(p, rope);
      RUN(ctx, "prep backward f32, every gradient", camdelta_prep_backward(ctx, &g, saved));
    }
    camdelta_prep_saved_destroy(saved);
    pool_free(p);
  }
}

static void scan_ops(camdelta_context *ctx, pool *p, const shape *s) {
  const size_t N = s->F * s->S, tok = s->B * s->H * s->D * N, st = s->B * s->H * s->D * s->D;
  const size_t frames = s->B * s->H * s->F;
  const camdelta_buffer q = buf(p, tok), k = buf(p, tok), v = buf(p, tok), beta = buf(p, frames * s->S),
                        decay = buf(p, frames), out = buf(p, tok), init = buf(p, st), fin = buf(p, st);
  static const char *const dirs[2] = {"causal", "reverse"};
  for (int alg = CAMDELTA_SCAN_AUTO; alg <= CAMDELTA_SCAN_CHUNKWISE; alg++)
    for (int rev = 0; rev < 2; rev++)
      for (int prec = CAMDELTA_PRECISION_EXACT; prec <= CAMDELTA_PRECISION_TF32; prec++) {
        camdelta_scan_args a = {.B = s->B, .H = s->H, .D = s->D, .F = s->F, .S = s->S, .reverse = rev,
                                .algorithm = (camdelta_scan_algorithm)alg, .q = q, .k = k, .v = v, .beta = beta,
                                .decay = decay, .out = out, .init_state = init, .final_state = fin,
                                .precision = (camdelta_precision)prec};
        char what[128];
        snprintf(what, sizeof what, "scan forward %s %s %s, states", camdelta_scan_algorithm_name(a.algorithm),
                 dirs[rev], camdelta_precision_name(a.precision));
        camdelta_scan_saved *saved;
        TU_OK(camdelta_scan_saved_create(ctx, &saved));
        cd_trace_note(ctx, "%s", what);
        describe_scan(ctx, &a);
        TU_OK(camdelta_scan_forward(ctx, &a, saved));
        camdelta_scan_backward_args g = {
            .B = s->B, .H = s->H, .D = s->D, .F = s->F, .S = s->S, .reverse = rev, .q = q, .k = k, .v = v,
            .beta = beta, .decay = decay, .init_state = init, .grad_out = buf(p, tok), .grad_final_state = fin,
            .dq = buf(p, tok), .dk = buf(p, tok), .dv = buf(p, tok), .dbeta = buf(p, frames * s->S),
            .dinit_state = buf(p, st), .ddecay = buf(p, frames), .precision = a.precision};
        snprintf(what, sizeof what, "scan backward after %s %s %s, saved", camdelta_scan_algorithm_name(a.algorithm),
                 dirs[rev], camdelta_precision_name(a.precision));
        cd_trace_note(ctx, "%s", what);
        describe_backward(ctx, &g);
        TU_OK(camdelta_scan_backward(ctx, &g, saved));
        if (alg == CAMDELTA_SCAN_AUTO) {
          snprintf(what, sizeof what, "scan backward %s %s, recomputed", dirs[rev],
                   camdelta_precision_name(a.precision));
          RUN(ctx, what, camdelta_scan_backward(ctx, &g, NULL));
          a.init_state = a.final_state = (camdelta_buffer){0};
          snprintf(what, sizeof what, "scan forward auto %s %s, no states", dirs[rev],
                   camdelta_precision_name(a.precision));
          RUN(ctx, what, camdelta_scan_forward(ctx, &a, NULL));
        }
        camdelta_scan_saved_destroy(saved);
        p->n -= 7; /* the backward's buffers */
        for (size_t i = 0; i < 7; i++) clReleaseMemObject(p->mem[p->n + i]);
      }
  /* state summaries of the whole sequence as one segment */
  const camdelta_buffer T = buf(p, st), E = buf(p, st), G = buf(p, st), M = buf(p, st);
  for (int rev = 0; rev < 2; rev++) {
    char what[96];
    camdelta_scan_summary_args sa = {.B = s->B, .H = s->H, .D = s->D, .F = s->F, .S = s->S, .reverse = rev,
                                     .k = k, .v = v, .beta = beta, .decay = decay, .init_state = init, .T = T,
                                     .E = E};
    snprintf(what, sizeof what, "scan summary %s", dirs[rev]);
    RUN(ctx, what, camdelta_scan_summary(ctx, &sa));
    camdelta_scan_grad_summary_args ga = {.B = s->B, .H = s->H, .D = s->D, .F = s->F, .S = s->S, .reverse = rev,
                                          .q = q, .k = k, .beta = beta, .decay = decay, .grad_out = out,
                                          .grad_final_state = fin, .G = G};
    snprintf(what, sizeof what, "scan grad summary %s", dirs[rev]);
    RUN(ctx, what, camdelta_scan_grad_summary(ctx, &ga));
  }
  camdelta_summary_apply_args ap = {.B = s->B, .H = s->H, .D = s->D, .transpose = 1, .T = T, .E = E, .M_in = init,
                                    .M_out = M};
  RUN(ctx, "summary apply", camdelta_summary_apply(ctx, &ap));
  camdelta_summary_combine_args co = {.B = s->B, .H = s->H, .D = s->D, .T1 = T, .E1 = E, .T2 = G, .E2 = init,
                                      .T = M, .E = fin};
  RUN(ctx, "summary combine", camdelta_summary_combine(ctx, &co));
  pool_free(p);
}

/* Two clips packed on one token axis: the first with the shape's frames of S tokens, the second with half as many
 * frames of S/2 tokens (rounded up to a multiple of 4). */
static void packed_ops(camdelta_context *ctx, pool *p, const shape *s) {
  const size_t F0 = s->F, F1 = (s->F + 1) / 2, S1 = (s->S / 2 + 3) / 4 * 4, F = F0 + F1;
  int64_t fo[64], co[3] = {0, (int64_t)F0, (int64_t)F};
  fo[0] = 0;
  for (size_t f = 0; f < F; f++) fo[f + 1] = fo[f] + (int64_t)(f < F0 ? s->S : S1);
  const size_t N = (size_t)fo[F], tok = s->H * s->D * N, st = 2 * s->H * s->D * s->D;
  camdelta_packed_clips pc = {.frame_offsets = fo, .clip_offsets = co, .clips = 2, .tokens = N};
  camdelta_scan_args a = {.B = 1, .H = s->H, .D = s->D, .F = F, .S = 0, .q = buf(p, tok), .k = buf(p, tok),
                          .v = buf(p, tok), .beta = buf(p, s->H * N), .decay = buf(p, s->H * F), .out = buf(p, tok),
                          .init_state = buf(p, st), .final_state = buf(p, st)};
  camdelta_scan_saved *saved;
  TU_OK(camdelta_scan_saved_create(ctx, &saved));
  RUN(ctx, "packed scan forward causal", camdelta_scan_forward_packed(ctx, &a, &pc, saved));
  camdelta_scan_backward_args g = {.B = 1, .H = s->H, .D = s->D, .F = F, .S = 0, .q = a.q, .k = a.k, .v = a.v,
                                   .beta = a.beta, .decay = a.decay, .init_state = a.init_state,
                                   .grad_out = buf(p, tok), .grad_final_state = a.final_state, .dq = buf(p, tok),
                                   .dk = buf(p, tok), .dv = buf(p, tok), .dbeta = buf(p, s->H * N),
                                   .ddecay = buf(p, s->H * F), .dinit_state = buf(p, st)};
  RUN(ctx, "packed scan backward causal, saved", camdelta_scan_backward_packed(ctx, &g, &pc, saved));
  a.reverse = g.reverse = 1;
  RUN(ctx, "packed scan forward reverse", camdelta_scan_forward_packed(ctx, &a, &pc, NULL));
  RUN(ctx, "packed scan backward reverse, recomputed", camdelta_scan_backward_packed(ctx, &g, &pc, NULL));
  camdelta_scan_saved_destroy(saved);
  pool_free(p);
}

static void branch_ops(camdelta_context *ctx, pool *p, const shape *s) {
  const size_t T = s->F, S = s->Hs * s->Ws, N = T * S, C = s->H * s->D, tok = s->B * N * C;
  const size_t bn16 = s->B * N * 16, rope = N * s->D / 2, frames = s->B * s->H * T;
  camdelta_camera_args ca = {.B = s->B, .T = T, .Hs = s->Hs, .Ws = s->Ws, .pt = 1, .ph = 1, .pw = 1, .D = s->D,
                             .camera_conditions = buf_zero(p, s->B * T * 20), .proj_q = buf(p, bn16),
                             .proj_kv = buf(p, bn16), .proj_o = buf(p, bn16), .rope_cos = buf(p, rope),
                             .rope_sin = buf(p, rope)};
  RUN(ctx, "camera forward", camdelta_camera_forward(ctx, &ca));
  const camdelta_chunking chunking = {.chunk_size = 3, .strategy = CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE};
  camdelta_short_conv_args sc = {.B = s->B, .T = T, .S = S, .C = C, .chunking = chunking, .k_raw = buf(p, tok),
                                 .conv_weight = buf(p, C * 4), .k_conv = buf(p, tok), .grad_k_conv = buf(p, tok),
                                 .dk_raw = buf(p, tok), .dconv_weight = buf(p, C * 4)};
  RUN(ctx, "short conv forward", camdelta_short_conv_forward(ctx, &sc));
  RUN(ctx, "short conv backward", camdelta_short_conv_backward(ctx, &sc));
  const size_t outs = s->B * s->H * s->D * N;
  camdelta_output_transform_args ot = {.B = s->B, .N = N, .H = s->H, .D = s->D, .out = buf(p, outs),
                                       .out2 = buf(p, outs), .proj_o = ca.proj_o, .rope_cos = ca.rope_cos,
                                       .rope_sin = ca.rope_sin, .y = buf(p, tok), .grad_y = sc.k_conv,
                                       .grad_out = buf(p, outs)};
  RUN(ctx, "output transform forward, two inputs", camdelta_output_transform_forward(ctx, &ot));
  RUN(ctx, "output transform backward", camdelta_output_transform_backward(ctx, &ot));
  camdelta_branch_args ba = {.B = s->B, .T = T, .Hs = s->Hs, .Ws = s->Ws, .H = s->H, .D = s->D, .pt = 1, .ph = 1,
                             .pw = 1, .chunking = chunking, .k_scale = 0.01f, .norm_eps = 1e-6f,
                             .q_raw = sc.k_raw, .k_raw = sc.k_conv, .v_raw = sc.dk_raw,
                             .conv_weight = sc.conv_weight, .q_norm_weight = buf(p, C), .k_norm_weight = buf(p, C),
                             .camera_conditions = ca.camera_conditions, .beta = buf(p, frames * S),
                             .decay = buf(p, frames), .y = ot.y};
  camdelta_branch_saved *saved;
  TU_OK(camdelta_branch_saved_create(ctx, &saved));
  RUN(ctx, "branch forward, saved", camdelta_branch_forward(ctx, &ba, saved));
  camdelta_branch_grads bg = {.grad_y = sc.grad_k_conv, .dq_raw = buf(p, tok), .dk_raw = buf(p, tok),
                              .dv_raw = buf(p, tok), .dconv_weight = sc.dconv_weight, .dq_norm_weight = buf(p, C),
                              .dk_norm_weight = buf(p, C), .dbeta = buf(p, frames * S), .ddecay = buf(p, frames)};
  RUN(ctx, "branch backward, saved", camdelta_branch_backward(ctx, &ba, &bg, saved));
  ba.precision = CAMDELTA_PRECISION_TF32;
  RUN(ctx, "branch forward tf32", camdelta_branch_forward(ctx, &ba, NULL));
  RUN(ctx, "branch backward tf32, recomputed", camdelta_branch_backward(ctx, &ba, &bg, NULL));
  /* bf16 activations (docs/math.md §8.7; the buffers hold twice what they need) */
  ba.precision = CAMDELTA_PRECISION_EXACT;
  ba.dtype = CAMDELTA_BF16;
  RUN(ctx, "branch forward bf16, saved", camdelta_branch_forward(ctx, &ba, saved));
  RUN(ctx, "branch backward bf16, saved", camdelta_branch_backward(ctx, &ba, &bg, saved));
  camdelta_branch_saved_destroy(saved);
  pool_free(p);
}

/* A stream of the production schedule (first_chunk_plus_one, chunk size 3, f32): its creation, the first block of
 * 4 frames committed, then a block of 3 frames without and with commit (the steady state). */
static void stream_ops(camdelta_context *ctx, pool *p, const shape *s) {
  const size_t S = s->Hs * s->Ws, C = s->H * s->D, tok = s->B * 4 * S * C;
  const camdelta_stream_args sa = {.B = s->B, .H = s->H, .D = s->D, .Hs = s->Hs, .Ws = s->Ws, .pt = 1, .ph = 1,
                                   .pw = 1, .chunk_size = 3, .strategy = CAMDELTA_CHUNK_FIRST_CHUNK_PLUS_ONE,
                                   .k_scale = 0.01f, .norm_eps = 1e-6f, .dtype = CAMDELTA_F32,
                                   .conv_weight = buf(p, C * 4), .q_norm_weight = buf(p, C),
                                   .k_norm_weight = buf(p, C)};
  camdelta_stream *st;
  RUN(ctx, "stream create", camdelta_stream_create(ctx, &sa, &st));
  camdelta_stream_step_args a = {.frames = 4, .commit = 1, .q_raw = buf(p, tok), .k_raw = buf(p, tok),
                                 .v_raw = buf(p, tok), .camera_conditions = buf_zero(p, s->B * 4 * 20),
                                 .beta = buf(p, s->B * s->H * 4 * S), .decay = buf(p, s->B * s->H * 4),
                                 .y = buf(p, tok)};
  RUN(ctx, "stream step, first block of 4 frames, commit", camdelta_stream_step(ctx, st, &a));
  a.frames = 3, a.commit = 0;
  RUN(ctx, "stream step, block of 3 frames", camdelta_stream_step(ctx, st, &a));
  a.commit = 1;
  RUN(ctx, "stream step, block of 3 frames, commit", camdelta_stream_step(ctx, st, &a));
  camdelta_stream_destroy(st);
  pool_free(p);
}

/* Writes the trace of every operation at every shape on a fresh context with `device`'s facts into `path`. */
static void trace_all(const char *device, const char *path) {
  camdelta_context *ctx;
  TU_OK(camdelta_context_create_from_queue(&ctx, camdelta_context_cl_context(base), camdelta_context_queue(base)));
  TU_OK(cd_context_emulate(ctx, device));
  FILE *f = fopen(path, "w");
  if (!f) fail_msg("cannot write %s", path);
  fprintf(f, "# golden plans: device facts '%s' (tests/test_plan_golden.c)\n", device);
  cd_trace_launches(ctx, f, 1);
  pool p = {.n = 0};
  for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
    const shape *s = &SHAPES[i];
    fprintf(f, "\n## %s (B %zu, H %zu, D %zu, F %zu, S %zu; grid %zux%zu)\n", s->name, s->B, s->H, s->D, s->F,
            s->S, s->Hs, s->Ws);
    prep_ops(ctx, &p, s);
    scan_ops(ctx, &p, s);
    packed_ops(ctx, &p, s);
    branch_ops(ctx, &p, s);
    stream_ops(ctx, &p, s);
  }
  cd_trace_launches(ctx, NULL, 0);
  fclose(f);
  camdelta_context_destroy(ctx);
}

/* The goldens were made with Debian 12's PoCL 3.1 (what CI installs). Another PoCL's compiler reports other local
 * memory sizes for the same kernels (PoCL 5.0: 0 where 3.1 counts the kernels' local arrays); with it the lines are
 * compared without their "lmem" field, the plans (kernels, options, sizes) still to the letter. */
static int golden_compiler(void) {
  cl_device_id dev = NULL;
  cl_platform_id plat = NULL;
  char version[256] = "";
  if (clGetContextInfo(camdelta_context_cl_context(base), CL_CONTEXT_DEVICES, sizeof dev, &dev, NULL) != CL_SUCCESS ||
      clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL) != CL_SUCCESS ||
      clGetPlatformInfo(plat, CL_PLATFORM_VERSION, sizeof version, version, NULL) != CL_SUCCESS)
    return 0;
  version[sizeof version - 1] = '\0';
  return strstr(version, "PoCL 3.1") != NULL;
}

static void strip_lmem(char *line) {
  char *m = strstr(line, " lmem ");
  if (m) strcpy(m, "\n");
}

static void check_device(const char *device) {
  if (!base) skip(); /* no PoCL here (a GPU machine without it): the goldens are PoCL's */
  const int same_compiler = golden_compiler();
  if (!same_compiler) printf("PoCL is not 3.1: the lines are compared without their local memory sizes\n");
  char name[64], got[1024];
  snprintf(name, sizeof name, "plans-%s.txt", device);
  const char *update = getenv("CAMDELTA_GOLDEN_UPDATE");
  if (update && *update) {
    snprintf(got, sizeof got, "%s/%s", update, name);
    trace_all(device, got);
    printf("wrote %s\n", got);
    return;
  }
  snprintf(got, sizeof got, "%s/%s", tu_tmpdir(), name);
  trace_all(device, got);
  const char *src = getenv("CAMDELTA_SOURCE_DIR");
  if (!src) fail_msg("CAMDELTA_SOURCE_DIR is not set: run through ctest");
  char want[1024];
  snprintf(want, sizeof want, "%s/tests/golden/%s", src, name);
  FILE *a = fopen(want, "r"), *b = fopen(got, "r");
  if (!a || !b) fail_msg("cannot read %s or %s", want, got);
  char la[4096], lb[4096];
  unsigned line = 0;
  for (;;) {
    line++;
    const char *ra = fgets(la, sizeof la, a), *rb = fgets(lb, sizeof lb, b);
    if (!ra && !rb) break;
    if (!same_compiler) {
      if (ra) strip_lmem(la);
      if (rb) strip_lmem(lb);
    }
    if (!ra || !rb || strcmp(la, lb) != 0) {
      fclose(a);
      fclose(b);
      fail_msg("%s differs from the golden plans at line %u:\n  golden: %s  now:    %s(the whole trace: %s; "
               "regenerate with CAMDELTA_GOLDEN_UPDATE=DIR only for a change that is meant)",
               name, line, ra ? la : "(end)\n", rb ? lb : "(end)\n", got);
    }
  }
  fclose(a);
  fclose(b);
}

static void test_h200(void **state) {
  (void)state;
  check_device("h200");
}

static void test_h100(void **state) {
  (void)state;
  check_device("h100");
}

static void test_pocl2(void **state) {
  (void)state;
  check_device("pocl2");
}

static int setup(void **state) {
  (void)state;
  if (camdelta_context_create(&base, "pocl") != CAMDELTA_OK) {
    base = NULL;
    printf("no PoCL device: %s\n", camdelta_last_message());
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  camdelta_context_destroy(base);
  base = NULL;
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_h200), cmocka_unit_test(test_h100),
                                     cmocka_unit_test(test_pocl2)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
