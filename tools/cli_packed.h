/* `camdelta run scan|scan-backward` over packed clips (tools/cmd_run_packed.c): used when the --in folder holds
 * frame_offsets.npy or clip_offsets.npy. */
#ifndef CAMDELTA_CLI_PACKED_H
#define CAMDELTA_CLI_PACKED_H

#include "camdelta.h"

/** 1 when DIR/frame_offsets.npy or DIR/clip_offsets.npy exists. */
int cli_packed_requested(const char *in);
int cmd_run_packed(int backward, const char *in, const char *out, const char *device, int reverse,
                   camdelta_scan_algorithm algorithm, int final_state, int quiet);
/** `camdelta bench --packed` (tools/cmd_bench_packed.c): packed against fixed-shape on equal clips. */
int cli_bench_packed_requested(int argc, char **argv);
int cmd_bench_packed(int argc, char **argv);

#endif
