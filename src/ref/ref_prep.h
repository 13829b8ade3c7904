/* What the prep's f64 references (ref_prep.c, ref_prep_backward.c) compute alike, so that the backward's
 * recomputation of the forward is the forward's own arithmetic (the ReLU masks agree bit for bit). Not installed. */
#ifndef CAMDELTA_REF_PREP_H
#define CAMDELTA_REF_PREP_H

#include "runtime/internal.h"

/** The inverse RMS of token `tok`'s (offset of its C = H*D channels) raw q and k over all heads. */
void cd_ref_prep_inv_rms(const camdelta_ref_prep *p, size_t tok, double *irq, double *irk);
/** One head's normalised inputs at channel offset `row`, head h: qn = ReLU(RMSNorm(q)), kn = ReLU(RMSNorm(k)) *
 *  k_scale, vn = v. Returns |kn|^2 (the inflation's numerator). */
double cd_ref_prep_head(const camdelta_ref_prep *p, size_t row, size_t h, double irq, double irk, double *qn,
                        double *kn, double *vn);
/** y = the camera transform of one head's x (D values): the first D/2 by the 4x4 matrix P per group of four, the
 *  rest rotated by the rope tables cs, sn (D/2 values each). */
void cd_ref_prep_transform(size_t D, const double *P, const double *cs, const double *sn, const double *x, double *y);

#endif
