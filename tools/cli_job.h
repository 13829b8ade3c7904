/* One `camdelta run OP` on .npy files (tools/cmd_run.c, tools/cmd_run_branch.c): its input files in slots, uploaded
 * to the device as they are once all are read and checked; its outputs as device buffers, written as one output
 * set at the end; and the device context. Nothing touches the device before cli_job_start, so an input or usage
 * error leaves no trace. */
#ifndef CAMDELTA_CLI_JOB_H
#define CAMDELTA_CLI_JOB_H

#include "cli_common.h"

#define CLI_JOB_MAX 24 /* inputs and, apart, outputs of one operation */

typedef struct cli_job {
  const cli_run_opts *opts; /* borrowed: --in, --out, --device, --quiet and the operation's name */
  cli_tensor in[CLI_JOB_MAX];
  cl_mem in_mem[CLI_JOB_MAX];
  unsigned char host_only[CLI_JOB_MAX]; /* read on the host, never uploaded (e.g. chunk_index) */
  int n_in;
  cli_output out[CLI_JOB_MAX];
  unsigned char out_used[CLI_JOB_MAX]; /* addressed by cli_job_out: an output never given to the call is a bug */
  int n_out;
  camdelta_context *ctx;
} cli_job;

/** A job with no inputs or outputs yet for the command line's `opts` (kept, not copied: it must outlive the job);
 *  NULL when out of host memory. */
cli_job *cli_job_new(const cli_run_opts *opts);
/** Release the inputs, their device copies, the output buffers and the context. NULL is a no-op. */
void cli_job_free(cli_job *j);
/** Take the next input slot: *idx gets it and j->in[*idx] is the tensor to load into; `host_only` keeps it off the
 *  device. CLI_EXIT_OK, or CLI_EXIT_FAILURE (with a message) when all CLI_JOB_MAX slots are taken. */
int cli_job_slot(cli_job *j, int host_only, int *idx);
/** Open the device (an error naming the selector, exit 4) and upload every present input not kept on the host. */
int cli_job_start(cli_job *j);
/** Add output NAME.npy of `type` and `shape` with a zeroed device buffer (after cli_job_start). CLI_EXIT_OK, or the
 *  error of cli_output_alloc, or CLI_EXIT_FAILURE when all CLI_JOB_MAX outputs are taken. */
int cli_job_output(cli_job *j, const char *name, camdelta_npy_type type, int ndim, const size_t *shape);
/** One output of a job: cli_job_output's arguments. */
typedef struct cli_output_spec {
  const char *name;
  camdelta_npy_type type;
  int ndim;
  const size_t *shape;
} cli_output_spec;
/** cli_job_output for outs[0 .. n-1] in order; the first failure's exit code (the outputs before it stay added). */
int cli_job_outputs(cli_job *j, int n, const cli_output_spec *outs);
#define CLI_JOB_OUTPUTS(j, outs) cli_job_outputs((j), (int)(sizeof(outs) / sizeof((outs)[0])), (outs))
/** The device buffer of input slot `idx`; {NULL, 0} for idx < 0 or an optional file that was not there. */
camdelta_buffer cli_job_in(const cli_job *j, int idx);
/** The device buffer of the output named `name` (as given to cli_job_output); {NULL, 0} when the job has none of
 *  that name (an optional output not asked for). */
camdelta_buffer cli_job_out(cli_job *j, const char *name);
/** cli_run_finish for this job: the call's status, the outputs written all or nothing, the report line. An output
 *  that cli_job_out never gave out is an internal error (exit 1) and nothing is written. */
int cli_job_finish(cli_job *j, camdelta_status st, const char *call, const camdelta_profile *prof,
                   const char *detail);

#endif
