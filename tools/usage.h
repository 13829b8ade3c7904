/* The tool's help texts (tools/usage.c). */
#ifndef CAMDELTA_CLI_USAGE_H
#define CAMDELTA_CLI_USAGE_H

#include <stdio.h>

/** `camdelta help`: the commands, the device selector and the exit codes, to `f`. */
void usage_main(FILE *f);
/** Each command's options on stdout. usage_run includes the camera-branch operations and --sequence-parallel. */
void usage_info(void);
void usage_run(void);
void usage_cache(void);
void usage_bench(void);
void usage_tune(void);
void usage_demo(void);
/** The camera-branch operations of `run`, and the --sequence-parallel part of `help run|demo|bench`. */
void usage_run_branch(void);
void usage_sp(void);

#endif
