/* Device discovery and selection. */
#ifndef CAMDELTA_DEVICE_H
#define CAMDELTA_DEVICE_H
#include <strings.h>

#include "runtime/internal.h"

#define CD_MAX_PLATFORMS 16
#define CD_MAX_DEVICES 64

typedef struct cd_device_entry {
  cl_platform_id platform;
  cl_device_id device;
  unsigned platform_index, device_index;
  char platform_name[128], platform_vendor[128], device_name[128], device_vendor[128];
  cl_device_type type;
} cd_device_entry;

typedef struct cd_device_list {
  unsigned count;
  cd_device_entry entries[CD_MAX_DEVICES];
} cd_device_list;

/** All devices of all platforms, in platform/device index order. */
camdelta_status cd_enumerate(cd_device_list *list);
/** Resolve a selector (NULL: CAMDELTA_DEVICE, then first GPU, then first device). */
camdelta_status cd_select_device(const char *selector, cd_device_entry *out);

#endif
