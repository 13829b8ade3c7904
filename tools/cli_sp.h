/* Sequence-parallel modes of the camdelta tool (tools/cmd_sp.c): `run`, `demo` and `bench` with
 * --sequence-parallel under mpirun. Built with MPI when CMake finds it (CAMDELTA_WITH_MPI); otherwise these
 * report that the tool was built without MPI. */
#ifndef CAMDELTA_CLI_SP_H
#define CAMDELTA_CLI_SP_H

/** 1 when argv[0..argc) holds "--sequence-parallel". */
int cli_sp_requested(int argc, char **argv);
int cmd_run_sp(int argc, char **argv);
int cmd_demo_sp(int argc, char **argv);
int cmd_bench_sp(int argc, char **argv);

#endif
