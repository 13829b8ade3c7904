/* Status names and the per-thread error message. */
#include <stdio.h>
#include <string.h>

#include "runtime/internal.h"

static _Thread_local char cd_message[16384];

camdelta_status cd_fail(camdelta_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cd_message, sizeof cd_message, fmt, ap);
  va_end(ap);
  return st;
}

void cd_clear_error(void) { cd_message[0] = '\0'; }

const char *cd_escape(const char *in, size_t n, char *out, size_t cap) {
  static const char digits[] = "0123456789abcdef";
  size_t k = 0;
  for (size_t i = 0; (n == (size_t)-1 ? in[i] != '\0' : i < n) && k + 5 < cap; i++) {
    const unsigned char ch = (unsigned char)in[i];
    if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
      out[k++] = (char)ch;
    } else {
      out[k++] = '\\';
      out[k++] = 'x';
      out[k++] = digits[ch >> 4];
      out[k++] = digits[ch & 15];
    }
  }
  if (cap) out[k] = '\0';
  return out;
}

camdelta_status camdelta_set_error(camdelta_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (fmt) vsnprintf(cd_message, sizeof cd_message, fmt, ap);
  else cd_message[0] = '\0';
  va_end(ap);
  return status;
}

const char *camdelta_last_message(void) { return cd_message; }

camdelta_status cd_cl_fail(cl_int err, const char *what) {
  camdelta_status st = (err == CL_OUT_OF_HOST_MEMORY || err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                        err == CL_OUT_OF_RESOURCES)
                           ? CAMDELTA_ERROR_OUT_OF_MEMORY
                           : CAMDELTA_ERROR_OPENCL;
  return cd_fail(st, "%s: %s (%d)", what, camdelta_cl_error_name(err), (int)err);
}

int camdelta_is_error(camdelta_status status) { return status != CAMDELTA_OK; }

const char *camdelta_status_name(camdelta_status status) {
  switch (status) {
    case CAMDELTA_OK: return "CAMDELTA_OK";
    case CAMDELTA_ERROR_INVALID_ARGUMENT: return "CAMDELTA_ERROR_INVALID_ARGUMENT";
    case CAMDELTA_ERROR_SHAPE: return "CAMDELTA_ERROR_SHAPE";
    case CAMDELTA_ERROR_UNSUPPORTED: return "CAMDELTA_ERROR_UNSUPPORTED";
    case CAMDELTA_ERROR_BUFFER_TOO_SMALL: return "CAMDELTA_ERROR_BUFFER_TOO_SMALL";
    case CAMDELTA_ERROR_OVERFLOW: return "CAMDELTA_ERROR_OVERFLOW";
    case CAMDELTA_ERROR_OUT_OF_MEMORY: return "CAMDELTA_ERROR_OUT_OF_MEMORY";
    case CAMDELTA_ERROR_DEVICE_NOT_FOUND: return "CAMDELTA_ERROR_DEVICE_NOT_FOUND";
    case CAMDELTA_ERROR_OPENCL: return "CAMDELTA_ERROR_OPENCL";
    case CAMDELTA_ERROR_BUILD: return "CAMDELTA_ERROR_BUILD";
    case CAMDELTA_ERROR_IO: return "CAMDELTA_ERROR_IO";
    case CAMDELTA_ERROR_FORMAT: return "CAMDELTA_ERROR_FORMAT";
  }
  return "CAMDELTA_ERROR_UNKNOWN";
}

const char *camdelta_cl_error_name(cl_int err) {
  switch (err) {
#define CD_CASE(x) \
  case x: return #x;
    CD_CASE(CL_SUCCESS)
    CD_CASE(CL_DEVICE_NOT_FOUND)
    CD_CASE(CL_DEVICE_NOT_AVAILABLE)
    CD_CASE(CL_COMPILER_NOT_AVAILABLE)
    CD_CASE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    CD_CASE(CL_OUT_OF_RESOURCES)
    CD_CASE(CL_OUT_OF_HOST_MEMORY)
    CD_CASE(CL_PROFILING_INFO_NOT_AVAILABLE)
    CD_CASE(CL_MEM_COPY_OVERLAP)
    CD_CASE(CL_IMAGE_FORMAT_MISMATCH)
    CD_CASE(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    CD_CASE(CL_BUILD_PROGRAM_FAILURE)
    CD_CASE(CL_MAP_FAILURE)
    CD_CASE(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    CD_CASE(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    CD_CASE(CL_COMPILE_PROGRAM_FAILURE)
    CD_CASE(CL_LINKER_NOT_AVAILABLE)
    CD_CASE(CL_LINK_PROGRAM_FAILURE)
    CD_CASE(CL_DEVICE_PARTITION_FAILED)
    CD_CASE(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
    CD_CASE(CL_INVALID_VALUE)
    CD_CASE(CL_INVALID_DEVICE_TYPE)
    CD_CASE(CL_INVALID_PLATFORM)
    CD_CASE(CL_INVALID_DEVICE)
    CD_CASE(CL_INVALID_CONTEXT)
    CD_CASE(CL_INVALID_QUEUE_PROPERTIES)
    CD_CASE(CL_INVALID_COMMAND_QUEUE)
    CD_CASE(CL_INVALID_HOST_PTR)
    CD_CASE(CL_INVALID_MEM_OBJECT)
    CD_CASE(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
    CD_CASE(CL_INVALID_IMAGE_SIZE)
    CD_CASE(CL_INVALID_SAMPLER)
    CD_CASE(CL_INVALID_BINARY)
    CD_CASE(CL_INVALID_BUILD_OPTIONS)
    CD_CASE(CL_INVALID_PROGRAM)
    CD_CASE(CL_INVALID_PROGRAM_EXECUTABLE)
    CD_CASE(CL_INVALID_KERNEL_NAME)
    CD_CASE(CL_INVALID_KERNEL_DEFINITION)
    CD_CASE(CL_INVALID_KERNEL)
    CD_CASE(CL_INVALID_ARG_INDEX)
    CD_CASE(CL_INVALID_ARG_VALUE)
    CD_CASE(CL_INVALID_ARG_SIZE)
    CD_CASE(CL_INVALID_KERNEL_ARGS)
    CD_CASE(CL_INVALID_WORK_DIMENSION)
    CD_CASE(CL_INVALID_WORK_GROUP_SIZE)
    CD_CASE(CL_INVALID_WORK_ITEM_SIZE)
    CD_CASE(CL_INVALID_GLOBAL_OFFSET)
    CD_CASE(CL_INVALID_EVENT_WAIT_LIST)
    CD_CASE(CL_INVALID_EVENT)
    CD_CASE(CL_INVALID_OPERATION)
    CD_CASE(CL_INVALID_GL_OBJECT)
    CD_CASE(CL_INVALID_BUFFER_SIZE)
    CD_CASE(CL_INVALID_MIP_LEVEL)
    CD_CASE(CL_INVALID_GLOBAL_WORK_SIZE)
    CD_CASE(CL_INVALID_PROPERTY)
    CD_CASE(CL_INVALID_IMAGE_DESCRIPTOR)
    CD_CASE(CL_INVALID_COMPILER_OPTIONS)
    CD_CASE(CL_INVALID_LINKER_OPTIONS)
    CD_CASE(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef CD_CASE
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "CL_UNKNOWN_ERROR";
  }
}

unsigned camdelta_version_number(void) { return CAMDELTA_VERSION_NUMBER; }
const char *camdelta_version_string(void) { return CAMDELTA_VERSION_STRING; }
