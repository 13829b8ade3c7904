/* The names of the scan's public enums (camdelta.h). */
#include "camdelta.h"

const char *camdelta_precision_name(camdelta_precision precision) {
  switch (precision) {
    case CAMDELTA_PRECISION_EXACT: return "exact";
    case CAMDELTA_PRECISION_TF32: return "tf32";
  }
  return "unknown";
}

const char *camdelta_scan_algorithm_name(camdelta_scan_algorithm algorithm) {
  switch (algorithm) {
    case CAMDELTA_SCAN_AUTO: return "auto";
    case CAMDELTA_SCAN_SEQUENTIAL: return "sequential";
    case CAMDELTA_SCAN_CHUNKWISE: return "chunkwise";
  }
  return "unknown";
}
