/* camdelta command-line tool: dispatch to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli_common.h"

static void usage_main(FILE *f) {
  fprintf(f,
          "usage: camdelta <command> [options]\n"
          "\n"
          "The camera branch of a video diffusion model's linear attention (UCPE\n"
          "single-path delta rule) on any OpenCL device.\n"
          "\n"
          "commands:\n"
          "  info [--device SEL]            platforms, devices, the chosen device, its\n"
          "                                 extensions and the kernel cache folder\n"
          "  run OP --in DIR --out DIR ...  run one operation (prep, scan, scan-backward,\n"
          "                                 prep-backward) on NumPy .npy files\n"
          "  demo [--shape B,H,D,F,S]       the main job: a synthetic camera orbit through\n"
          "                                 prep, causal and reverse scan and their\n"
          "                                 backward, checked against the f64 reference\n"
          "  bench [--shape NAME]...        kernel times, GB/s and TFLOP/s per operation\n"
          "  tune [--shape NAME] [--save]   sweep the scan's tensor-core tiles on this device\n"
          "  cache list|clear|warm|dir      the on-disk kernel cache\n"
          "  help [COMMAND]                 this text, or a command's options\n"
          "  --version                      print the version\n"
          "\n"
          "Device selector SEL (also the environment variable CAMDELTA_DEVICE): P:D\n"
          "(platform and device index, as `camdelta info` lists them), gpu, cpu,\n"
          "accelerator, or a case-insensitive part of the platform or device name or\n"
          "vendor. Default: the first GPU, else the first device.\n"
          "\n"
          "exit status: 0 success, 1 other failure (e.g. an output file cannot be\n"
          "written), 2 usage error, 3 bad input (missing file, wrong dtype or shape),\n"
          "4 device or OpenCL error.\n");
}

static int version(void) {
  printf("camdelta %s (library %s)\n", CAMDELTA_VERSION_STRING, camdelta_version_string());
  return CLI_EXIT_OK;
}

static int help(int argc, char **argv) {
  if (argc < 1) {
    usage_main(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(argv[0], "info") == 0) usage_info();
  else if (strcmp(argv[0], "run") == 0) usage_run();
  else if (strcmp(argv[0], "cache") == 0) usage_cache();
  else if (strcmp(argv[0], "bench") == 0) usage_bench();
  else if (strcmp(argv[0], "tune") == 0) usage_tune();
  else if (strcmp(argv[0], "demo") == 0) usage_demo();
  else if (strcmp(argv[0], "help") == 0) usage_main(stdout);
  else return cli_error(CLI_EXIT_USAGE, "help: unknown command '%s' (try 'camdelta help')", argv[0]);
  return CLI_EXIT_OK;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage_main(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) return version();
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
    return help(argc - 2, argv + 2);
  if (strcmp(cmd, "info") == 0) return cmd_info(argc - 2, argv + 2);
  if (strcmp(cmd, "run") == 0) return cmd_run(argc - 2, argv + 2);
  if (strcmp(cmd, "cache") == 0) return cmd_cache(argc - 2, argv + 2);
  if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 2, argv + 2);
  if (strcmp(cmd, "tune") == 0) return cmd_tune(argc - 2, argv + 2);
  if (strcmp(cmd, "demo") == 0) return cmd_demo(argc - 2, argv + 2);
  return cli_error(CLI_EXIT_USAGE, "unknown command '%s' (try 'camdelta help')", cmd);
}
