/* The job of one `camdelta run OP` (tools/cli_job.h). */
#include "cli_job.h"

#include <stdlib.h>
#include <string.h>

cli_job *cli_job_new(const cli_run_opts *opts) {
  cli_job *j = calloc(1, sizeof *j);
  if (j) j->opts = opts;
  return j;
}

void cli_job_free(cli_job *j) {
  if (!j) return;
  for (int i = 0; i < j->n_in; i++) {
    cli_tensor_free(&j->in[i]);
    if (j->in_mem[i]) clReleaseMemObject(j->in_mem[i]);
  }
  for (int i = 0; i < j->n_out; i++)
    if (j->out[i].mem) clReleaseMemObject(j->out[i].mem);
  if (j->ctx) camdelta_context_destroy(j->ctx);
  free(j);
}

int cli_job_slot(cli_job *j, int host_only, int *idx) {
  if (j->n_in >= CLI_JOB_MAX) return cli_error(CLI_EXIT_FAILURE, "internal: more than %d inputs", CLI_JOB_MAX);
  *idx = j->n_in++;
  j->host_only[*idx] = (unsigned char)(host_only != 0);
  return CLI_EXIT_OK;
}

int cli_job_start(cli_job *j) {
  int rc = cli_context(&j->ctx, j->opts->device);
  for (int i = 0; i < j->n_in && !rc; i++)
    if (j->in[i].present && !j->host_only[i]) rc = cli_upload(j->ctx, &j->in[i], &j->in_mem[i]);
  return rc;
}

int cli_job_output(cli_job *j, const char *name, camdelta_npy_type type, int ndim, const size_t *shape) {
  if (j->n_out >= CLI_JOB_MAX) return cli_error(CLI_EXIT_FAILURE, "internal: more than %d outputs", CLI_JOB_MAX);
  return cli_output_alloc(j->ctx, &j->out[j->n_out++], name, type, ndim, shape);
}

int cli_job_outputs(cli_job *j, int n, const cli_output_spec *outs) {
  int rc = CLI_EXIT_OK;
  for (int i = 0; i < n && !rc; i++) rc = cli_job_output(j, outs[i].name, outs[i].type, outs[i].ndim, outs[i].shape);
  return rc;
}

camdelta_buffer cli_job_in(const cli_job *j, int idx) {
  camdelta_buffer b = {NULL, 0};
  if (idx >= 0 && idx < j->n_in && j->in[idx].present) b.mem = j->in_mem[idx];
  return b;
}

camdelta_buffer cli_job_out(cli_job *j, const char *name) {
  for (int k = 0; k < j->n_out; k++)
    if (strcmp(j->out[k].name, name) == 0) {
      j->out_used[k] = 1;
      return (camdelta_buffer){.mem = j->out[k].mem, .offset = 0};
    }
  return (camdelta_buffer){.mem = NULL, .offset = 0};
}

int cli_job_finish(cli_job *j, camdelta_status st, const char *call, const camdelta_profile *prof,
                   const char *detail) {
  const cli_run_opts *o = j->opts;
  for (int k = 0; k < j->n_out; k++)
    if (!j->out_used[k])
      return cli_error(CLI_EXIT_FAILURE, "internal: output '%s' of %s was not passed to the call", j->out[k].name,
                       call);
  return cli_run_finish(j->ctx, st, call, prof, o->op_name, detail, j->out, j->n_out, o->out, o->quiet);
}
