/* The output-commit module of the tool (tools/cli_outset.c): every output of one command goes to its --out folder
 * all or nothing, up to the last rename and across a kill -9.
 *
 * 1. Each output is written to a temporary file ".NAME.npy.cdtmp.TOKEN" in the folder (O_CREAT | O_EXCL |
 *    O_NOFOLLOW, fsynced), held under an exclusive flock(2) for as long as its writer lives.
 * 2. The commit, under an exclusive flock on the folder itself (one commit per folder at a time): a journal
 *    ".camdelta-commit.TOKEN" lists the outputs and whether each replaces a file; each file it replaces is kept as a
 *    hard link ".NAME.npy.cdold.TOKEN"; the journal and the folder are fsynced; the temporary files are renamed over
 *    their names; the folder is fsynced; removing the journal is the commit point; then the links go.
 * 3. A rename that fails rolls back at once: the renamed outputs get their previous files back (or are removed
 *    when there was none), and every temporary file goes. A writer killed at any point leaves a journal (or only
 *    temporary files): the next output set opened on the folder, under the same folder lock, rolls it back the same
 *    way, and removes temporary files whose lock nobody holds (and those of older camdelta versions, whose process is
 *    gone). Only camdelta's own names are touched, and only files the user owns.
 * A symbolic link at an output's name is replaced, never followed; a folder in the way fails the add. */
#ifndef CAMDELTA_CLI_OUTSET_H
#define CAMDELTA_CLI_OUTSET_H

#include "camdelta.h"
#include "camdelta_npy.h"

typedef struct cli_outset cli_outset;

/** Create folder `dir` (and its parents) if it does not exist; an error printed (exit code returned) otherwise. */
int cli_make_dir(const char *dir);
/** Open the output set of folder `dir` (created if needed) and recover what a killed earlier commit left there.
 *  NULL after printing an error, *rc its exit code. Ignores SIGXFSZ, so that a file-size limit (ulimit -f) is an
 *  error of an add instead of a kill that leaves a temporary file. */
cli_outset *cli_outset_open(const char *dir, int *rc);
/** Remove, under the folder's lock, what killed commits left in `dir` (nothing when it does not exist): journals
 *  rolled back, stale temporary files removed. CLI_EXIT_OK, or an error printed. */
int cli_outset_recover(const char *dir);
/** Write host data as NAME.npy (NAME: no '/' or control byte) into a temporary file of the set; on failure the whole
 *  set is aborted (its temporary files removed) and the error printed (exit code returned). */
int cli_outset_add(cli_outset *s, const char *name, camdelta_npy_type type, int ndim, const size_t *shape,
                   const void *data);
/** Read `count` elements of `type` from `mem` (count from `shape`) and add them as NAME.npy. */
int cli_outset_add_device(cli_outset *s, camdelta_context *ctx, cl_mem mem, const char *name, camdelta_npy_type type,
                          int ndim, const size_t *shape);
/** Commit every file of the set (see above) and free the set: CLI_EXIT_OK, or an error printed after a rollback. */
int cli_outset_commit(cli_outset *s);
/** Remove the set's temporary files and free the set (NULL is a no-op). */
void cli_outset_abort(cli_outset *s);

#endif
