/* PLACEHOLDER (replaced within this session by the real implementation). */
#include "internal.h"

camdelta_status camdelta_scan_forward(camdelta_context *ctx, const camdelta_scan_args *args, camdelta_scan_saved *saved) {
  (void)ctx, (void)args, (void)saved;
  return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "camdelta_scan_forward: not implemented yet");
}
camdelta_status camdelta_scan_saved_create(camdelta_context *ctx, camdelta_scan_saved **out) {
  (void)ctx, (void)out;
  return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "not implemented yet");
}
void camdelta_scan_saved_destroy(camdelta_scan_saved *saved) { (void)saved; }
camdelta_status camdelta_scan_saved_states(const camdelta_scan_saved *saved, cl_mem *a, cl_mem *b) {
  (void)saved, (void)a, (void)b;
  return cd_fail(CAMDELTA_ERROR_UNSUPPORTED, "not implemented yet");
}
const char *camdelta_scan_algorithm_name(camdelta_scan_algorithm a) { (void)a; return "?"; }
