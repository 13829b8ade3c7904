/* Sequence-parallel modes of the camdelta tool: `run`, `demo` and `bench` with --sequence-parallel under mpirun
 * (tools/cmd_run_sp.c, cmd_demo_sp.c and cmd_bench_sp.c, on tools/sp_mpi.c). Built with MPI when CMake finds it
 * (CAMDELTA_WITH_MPI); otherwise they report that the tool was built without MPI. */
#ifndef CAMDELTA_CLI_SP_H
#define CAMDELTA_CLI_SP_H

/** 1 when argv[0..argc) holds "--sequence-parallel". */
int cli_sp_requested(int argc, char **argv);
int cmd_run_sp(int argc, char **argv);
int cmd_demo_sp(int argc, char **argv);
int cmd_bench_sp(int argc, char **argv);

#endif
