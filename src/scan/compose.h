/* What the scan engine's compositions share: the forward's and the backward's plans (forward.c, backward.c), which
 * the packed clips (packed.c) and the phases API (phases.c) run with their own geometry and buffers, the
 * summaries' chains from per-frame matrices (summary.c), and the phases API's per-frame matrices object. Internal to
 * src/scan/; not installed. */
#ifndef CAMDELTA_SCAN_COMPOSE_H
#define CAMDELTA_SCAN_COMPOSE_H
#include "camdelta_phases.h"
#include "scan/cost.h"
#include "scan/units.h"

/* ------------------------------------------------------------------------------------------ forward.c */

/** The algorithm CAMDELTA_SCAN_AUTO runs for BH chains of F frames of S tokens at D on this context: decided on the
 *  first call of that shape from the plans' estimated costs (cost.c) and kept with the plans; under the driver's
 *  loop budget never a sequential plan whose one frame does not fit a launch (its estimate then reads HUGE_VAL).
 *  e (may be NULL) receives the estimates. */
camdelta_status cd_scan_decide(camdelta_context *ctx, size_t BH, size_t D, size_t F, size_t S,
                               camdelta_scan_algorithm *alg, cd_scan_estimate *e);

/** What a forward plan is built for: the algorithm (not AUTO), BH chains at D, S tokens per frame (their shape
 *  class), the precision, 16-byte token rows where the tensor-core path runs (vec), and the kernels' variant
 *  (variant 0, extra ""; packed clips: their index and build options, packed.c). */
typedef struct cd_fwd_request {
  camdelta_scan_algorithm alg;
  size_t BH, D, S;
  camdelta_precision prec;
  int vec;
  unsigned variant;
  const char *extra;
} cd_fwd_request;
/** The context's forward plan for r, referenced and locked: cd_plan_release() after the launches. */
camdelta_status cd_forward_acquire(camdelta_context *ctx, const cd_fwd_request *r, cd_plan_entry **e);
/** The fixed-shape request of a forward call, its algorithm decided (AUTO as cd_scan_decide). */
camdelta_status cd_forward_request(camdelta_context *ctx, const camdelta_scan_args *a, cd_fwd_request *r);
/** The plan's algorithm. */
camdelta_scan_algorithm cd_forward_algorithm(const cd_plan_entry *e);
/** A checked forward on geometry geo: `saved` (may be NULL) gets the states (state_pre and state_post) and, after
 *  the chunkwise algorithm, A_f; the caller fills saved's shape fields once the launches succeed. */
camdelta_status cd_forward_enqueue(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                   const camdelta_scan_args *p, camdelta_scan_saved *saved, cd_launch *l);
/** The chunkwise plan's gram: A (into saved->a_mat with a saved object, else `A`) and U. */
camdelta_status cd_forward_gram(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                const camdelta_scan_args *p, camdelta_scan_saved *saved, camdelta_buffer A,
                                camdelta_buffer U, cd_launch *l);
/** The rest of a forward from its gram's A and U (the sequential algorithm: the whole of it; A, U not read). */
camdelta_status cd_forward_rest(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                const camdelta_scan_args *p, camdelta_scan_saved *saved, camdelta_buffer A,
                                camdelta_buffer U, cd_launch *l);
/** Makes `saved` hold (BHF, D, D) states (state_pre and state_post). */
camdelta_status cd_saved_reserve(camdelta_context *ctx, camdelta_scan_saved *saved, size_t bytes);
/** A chunkwise plan in words, from its tiles and its gram's and apply's forms ("chunkwise; precision ..."). */
void cd_chunk_text(const cd_chunk_cfg *cc, const cd_gram *gram, const cd_apply *apply, int split,
                   camdelta_precision requested, char *buf, size_t size);
/** The sizes of a forward's tensors (elements), from its shape. */
typedef struct cd_fwd_sizes {
  size_t tok, beta, frames, state;
} cd_fwd_sizes;
/** The checks of a forward's scalars (algorithm, precision, head dim, shape and its limits), op naming the entry. */
camdelta_status cd_forward_shape(const char *op, const camdelta_scan_args *p, cd_fwd_sizes *z);
/** camdelta_scan_args' buffers as an entry's slots (src/runtime/driver.c), how a call of those sizes uses them,
 *  and the check step that checks the forward's shape and sets them. */
enum { CD_FWD_NSLOTS = 8 };
extern const cd_slot cd_forward_slots[CD_FWD_NSLOTS];
void cd_forward_set_uses(cd_call *c, const cd_fwd_sizes *z);
camdelta_status cd_forward_uses(cd_call *c);
/** The whole check of a forward's arguments for callers outside the driver (the scan pair): the shape, every
 *  buffer's size and the outputs against the inputs. */
camdelta_status cd_forward_check(const char *op, const camdelta_scan_args *p);
/** A saved object's record of the forward that filled it, from its args (a packed call's S = 0 marks the packed
 *  layout; has_a: it holds A_f). */
void cd_scan_saved_commit(camdelta_scan_saved *saved, const camdelta_scan_args *a, int has_a);
/** The plan in words (camdelta_scan_plan_describe, CAMDELTA_SCAN_VERBOSE), without the AUTO estimates. */
void cd_forward_text(const cd_plan_entry *e, camdelta_precision requested, char *buf, size_t size);

/* ----------------------------------------------------------------------------------------- backward.c */

/** What a backward plan is built for: D, the precision, vec, the kernels' variant. */
typedef struct cd_bwd_request {
  size_t D;
  camdelta_precision prec;
  int vec;
  unsigned variant;
  const char *extra;
} cd_bwd_request;
camdelta_status cd_backward_acquire(camdelta_context *ctx, const cd_bwd_request *r, cd_plan_entry **e);
/** A backward's units for r: the CPU forms' gram, gradient chain, frames and ddecay where cd_scan_cpu_forms()
 *  says (cpu; not for packed clips), else the tensor-core gram, frames and dq apply where the device has them (tc;
 *  split: at the exact precision), else the FMA gram and frames; the gradient chain (pair: both directions' in one launch)
 *  and ddecay, with the backward program's tiles (cfg, its build options opts, overridden: by option "scan_bwd").
 *  The plan of camdelta_scan_backward, and the first part of the scan pair's backward plan (pair.c). */
typedef struct cd_bwd_units {
  cd_units u; /* first: cd_units_destroy is the destructor */
  cd_sbwd_cfg cfg;
  char opts[256];
  int overridden;
  int tc, split;
  int cpu; /* the gram, chain, frames and ddecay in their CPU forms, from u.cpu_prog */
} cd_bwd_units;
camdelta_status cd_backward_units(camdelta_context *ctx, const cd_bwd_request *r, int pair, cd_bwd_units *pl);
/** The grams of a backward: W, and A unless `A_given` (the forward's), and U where need_u (the state chain
 *  recomputes the states, or the caller wants the summaries). */
camdelta_status cd_backward_gram(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                 const camdelta_scan_backward_args *p, camdelta_buffer A, int A_given,
                                 camdelta_buffer U, int need_u, camdelta_buffer W, cd_launch *l);
/** The rest of a backward from its grams: states from the saved object (or recomputed from A, U when `states` is
 *  NULL mem, into the workspace). */
camdelta_status cd_backward_rest(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                 const camdelta_scan_backward_args *p, camdelta_buffer states, camdelta_buffer A,
                                 camdelta_buffer U, camdelta_buffer W, cd_launch *l);
/** The checks of a backward's scalars (precision, head dim, shape and its limits), its tensors' sizes in z
 *  (tok also dq, dk, dv, grad_out; state also init_state, grad_final_state, dinit_state), op naming the entry. */
camdelta_status cd_backward_shape(const char *op, const camdelta_scan_backward_args *a, cd_fwd_sizes *z);
/** A saved object against the backward's arguments: a forward's states of the same shape, direction and
 *  init_state. */
/** A saved forward's direction and init state against the backward call's (reverse, has_init). */
camdelta_status cd_saved_matches(const char *op, const camdelta_scan_saved *saved, int reverse, int has_init);
camdelta_status cd_backward_saved_check(const char *op, const camdelta_scan_backward_args *a,
                                        const camdelta_scan_saved *saved);
/** camdelta_scan_backward_args' buffers as an entry's slots, how a call of those sizes uses them, and the check
 *  step that checks the shape and the call's saved object (when it has one) and sets them. */
enum { CD_BWD_NSLOTS = 14 };
extern const cd_slot cd_backward_slots[CD_BWD_NSLOTS];
void cd_backward_set_uses(cd_call *c, const cd_fwd_sizes *z);
camdelta_status cd_backward_uses(cd_call *c);
/** The fixed-shape request of a backward call. */
cd_bwd_request cd_backward_request(const camdelta_scan_backward_args *a);
/** CAMDELTA_SCAN_VERBOSE's lines for the plan (what: "" or the variant's words). */
void cd_backward_verbose(camdelta_context *ctx, const cd_plan_entry *e, size_t D, const char *what);
/** A checked backward: the grams into the plan's workspace (A from saved where the chunkwise forward kept it), then
 *  the rest. */
camdelta_status cd_backward_enqueue(camdelta_context *ctx, cd_plan_entry *e, const cd_scan_geo *geo,
                                    const camdelta_scan_backward_args *p, const camdelta_scan_saved *saved,
                                    cd_launch *l);

/* ------------------------------------------------------------------------------------------ summary.c */

/** The context's summaries' plan for head dim D, referenced and locked (cd_plan_release releases it). */
camdelta_status cd_summary_acquire(camdelta_context *ctx, size_t D, cd_plan_entry **e);
/** The state summaries T, E, G (cd_chain_summary_io's meaning) of BH chains of F frames from their per-frame
 *  matrices A, U, W, with the summaries' plan `e` for D (its workspace holds the chains' scratch states). */
camdelta_status cd_summary_from_frames(camdelta_context *ctx, cd_plan_entry *e, size_t BH, size_t D, size_t F,
                                       int reverse, cl_mem A, cl_mem U, cl_mem W, camdelta_buffer init,
                                       camdelta_buffer gfinal, camdelta_buffer T, camdelta_buffer E,
                                       camdelta_buffer G, cd_launch *l);

/* ------------------------------------------------------------------------------------------- phases.c */

/** The per-frame matrices of one scan call (camdelta_phases.h): A_f, U_f, W_f in the object's own buffers, or A_f
 *  in the saved object of the call (a_saved, a reference kept until the next gram), and what the last gram was. */
struct camdelta_scan_frames {
  camdelta_context *ctx;
  cl_mem mem[3];
  size_t bytes[3];
  cl_mem a_saved;
  const camdelta_scan_saved *saved; /* the gram's saved object (compared, not read), or NULL */
  int valid, backward, has[3];
  size_t B, H, D, F, S;
  int reverse;
  camdelta_precision prec;
  camdelta_scan_algorithm alg;
};
enum { CD_FR_A, CD_FR_U, CD_FR_W };

#endif
