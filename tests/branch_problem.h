/* Random camera-branch problems on the host, shared by the camera-branch tests. */
#ifndef CD_BRANCH_PROBLEM_H
#define CD_BRANCH_PROBLEM_H
#include "testutil.h"

/** Random cameras (B, T, 20): rotations from random unit quaternions, translations in [-3, 3], focal lengths
 *  0.6..1.4 of the image extent, principal points near the image centre (image = grid * patch). */
void bp_cameras(float *cc, size_t B, size_t T, size_t Hs, size_t Ws, size_t ph, size_t pw);
/** Device buffer poisoned with 0xFF bytes, and a check that it still is. */
cl_mem bp_poison(size_t bytes);
int bp_untouched(cl_mem m, size_t bytes);
/** Download n floats. malloc'd. */
float *bp_download(cl_mem m, size_t n);
#endif
