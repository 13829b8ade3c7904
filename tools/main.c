/* camdelta command-line tool: dispatch to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli_common.h"
#include "usage.h"

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
