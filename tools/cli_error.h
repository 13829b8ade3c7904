/* The tool's error output and exit codes (tools/cli_error.c). */
#ifndef CAMDELTA_CLI_ERROR_H
#define CAMDELTA_CLI_ERROR_H

#include <stddef.h>

#include "camdelta.h"

#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

/* Exit codes (documented in `camdelta help`). */
enum {
  CLI_EXIT_OK = 0,
  CLI_EXIT_FAILURE = 1, /* anything else: an output file could not be written, ... */
  CLI_EXIT_USAGE = 2,   /* unknown command or option, missing or malformed option value */
  CLI_EXIT_INPUT = 3,   /* missing input file, wrong dtype, shape that does not fit */
  CLI_EXIT_DEVICE = 4   /* no such device, OpenCL or kernel build failure */
};

/** Print "camdelta: error: <message>" on stderr; returns `code`. */
int cli_error(int code, const char *fmt, ...) CLI_PRINTF(2, 3);
/** Exit code for a library status: device/OpenCL problems 4, bad input 3, I/O 1. */
int cli_exit_code(camdelta_status st);
/** cli_error with the library's last message: "<what>: <message>". */
int cli_lib_error(camdelta_status st, const char *what);
/** The device error (exit 4) for a failed camdelta_context_create: the selector and the library's message (which
 *  lists the devices there are). */
int cli_device_error(camdelta_status st, const char *selector);

/** Copy `text` into buf with every byte outside printable ASCII written as \xNN (for messages that echo
 *  user-controlled text, e.g. a file's header or an option value). */
const char *cli_escape(const char *text, char *buf, size_t size);

#endif
