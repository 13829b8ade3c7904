/* The tool's error output and exit codes: the base every other part of the tool reports through. */
#include "cli_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_error(int code, const char *fmt, ...) {
  /* one line, whatever the pieces hold: control bytes and escape sequences from file names, headers or option
   * values are written as \xNN, never raw to the terminal */
  static char msg[16384], shown[4 * sizeof msg + 1];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "camdelta: error: %s\n", cli_escape(msg, shown, sizeof shown));
  return code;
}

int cli_exit_code(camdelta_status st) {
  switch (st) {
    case CAMDELTA_OK: return CLI_EXIT_OK;
    case CAMDELTA_ERROR_INVALID_ARGUMENT:
    case CAMDELTA_ERROR_SHAPE:
    case CAMDELTA_ERROR_UNSUPPORTED:
    case CAMDELTA_ERROR_BUFFER_TOO_SMALL:
    case CAMDELTA_ERROR_OVERFLOW:
    case CAMDELTA_ERROR_FORMAT: return CLI_EXIT_INPUT;
    case CAMDELTA_ERROR_OUT_OF_MEMORY:
    case CAMDELTA_ERROR_DEVICE_NOT_FOUND:
    case CAMDELTA_ERROR_OPENCL:
    case CAMDELTA_ERROR_BUILD: return CLI_EXIT_DEVICE;
    case CAMDELTA_ERROR_IO: return CLI_EXIT_FAILURE;
  }
  return CLI_EXIT_FAILURE;
}

/* The library's message on one line: newlines (a build log) become "; ". */
static void one_line(const char *msg, char *buf, size_t size) {
  size_t n = 0;
  for (const char *p = msg; *p && n + 3 < size; p++) {
    if (*p == '\n') {
      while (p[1] == ' ' || p[1] == '\t' || p[1] == '\n') p++;
      if (p[1] == '\0') break;
      if (n > 0 && buf[n - 1] != ':') buf[n++] = ';';
      buf[n++] = ' ';
    } else {
      buf[n++] = *p;
    }
  }
  buf[n] = '\0';
}

int cli_lib_error(camdelta_status st, const char *what) {
  static char line[8192];
  one_line(camdelta_last_message(), line, sizeof line);
  if (!line[0]) snprintf(line, sizeof line, "%s", camdelta_status_name(st));
  size_t n = strlen(what);
  if (strncmp(line, what, n) == 0 && line[n] == ':') return cli_error(cli_exit_code(st), "%s", line);
  return cli_error(cli_exit_code(st), "%s: %s", what, line);
}

const char *cli_escape(const char *text, char *buf, size_t size) {
  static const char digits[] = "0123456789abcdef";
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)text; *p && n + 5 < size; p++) {
    if (*p >= 0x20 && *p < 0x7f) {
      buf[n++] = (char)*p;
    } else {
      buf[n++] = '\\';
      buf[n++] = 'x';
      buf[n++] = digits[*p >> 4];
      buf[n++] = digits[*p & 15];
    }
  }
  if (size) buf[n < size ? n : size - 1] = '\0';
  return buf;
}

int cli_device_error(camdelta_status st, const char *selector) {
  const char *env = getenv("CAMDELTA_DEVICE");
  const char *sel = selector ? selector : env && *env ? env : "default";
  /* every failure to get a device is a device error (4), whatever status it carries */
  static char line[8192];
  one_line(camdelta_last_message(), line, sizeof line);
  return cli_error(CLI_EXIT_DEVICE, "device '%s': %s", sel, line[0] ? line : camdelta_status_name(st));
}
