/* Device discovery and selection (CAMDELTA_DEVICE syntax, docs/math.md §6). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device.h"

static int icontains(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  if (n == 0) return 1;
  for (const char *h = hay; *h; h++) {
    size_t i = 0;
    while (i < n && h[i] && tolower((unsigned char)h[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == n) return 1;
  }
  return 0;
}

static void str_info_p(cl_platform_id p, cl_platform_info what, char *buf, size_t size) {
  buf[0] = '\0';
  if (clGetPlatformInfo(p, what, size, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
  buf[size - 1] = '\0';
}

static void str_info_d(cl_device_id d, cl_device_info what, char *buf, size_t size) {
  buf[0] = '\0';
  if (clGetDeviceInfo(d, what, size, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
  buf[size - 1] = '\0';
}

camdelta_status cd_enumerate(cd_device_list *list) {
  memset(list, 0, sizeof *list);
  cl_uint np = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &np);
  if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (err == CL_SUCCESS && np == 0))
    return cd_fail(CAMDELTA_ERROR_DEVICE_NOT_FOUND,
                   "no OpenCL platform found (is an ICD installed? e.g. pocl-opencl-icd, or the GPU driver)");
  if (err != CL_SUCCESS) return cd_cl_fail(err, "clGetPlatformIDs");
  cl_platform_id plats[CD_MAX_PLATFORMS];
  if (np > CD_MAX_PLATFORMS) np = CD_MAX_PLATFORMS;
  err = clGetPlatformIDs(np, plats, NULL);
  if (err != CL_SUCCESS) return cd_cl_fail(err, "clGetPlatformIDs");
  for (cl_uint p = 0; p < np; p++) {
    cl_uint nd = 0;
    cl_device_id devs[CD_MAX_DEVICES];
    err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, CD_MAX_DEVICES, devs, &nd);
    if (err != CL_SUCCESS) nd = 0;
    if (nd > CD_MAX_DEVICES) nd = CD_MAX_DEVICES;
    for (cl_uint d = 0; d < nd && list->count < CD_MAX_DEVICES; d++) {
      cd_device_entry *e = &list->entries[list->count++];
      e->platform = plats[p];
      e->device = devs[d];
      e->platform_index = p;
      e->device_index = d;
      str_info_p(plats[p], CL_PLATFORM_NAME, e->platform_name, sizeof e->platform_name);
      str_info_p(plats[p], CL_PLATFORM_VENDOR, e->platform_vendor, sizeof e->platform_vendor);
      str_info_d(devs[d], CL_DEVICE_NAME, e->device_name, sizeof e->device_name);
      str_info_d(devs[d], CL_DEVICE_VENDOR, e->device_vendor, sizeof e->device_vendor);
      e->type = 0;
      clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof e->type, &e->type, NULL);
    }
  }
  if (list->count == 0) return cd_fail(CAMDELTA_ERROR_DEVICE_NOT_FOUND, "no OpenCL device found on any platform");
  return CAMDELTA_OK;
}

static void describe(const cd_device_list *list, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (unsigned i = 0; i < list->count && used + 1 < size; i++) {
    const cd_device_entry *e = &list->entries[i];
    int w = snprintf(buf + used, size - used, "\n  %u:%u  %s (%s) on %s", e->platform_index, e->device_index,
                     e->device_name, e->device_vendor, e->platform_name);
    if (w < 0) break;
    used += (size_t)w;
  }
}

camdelta_status cd_select_device(const char *selector, cd_device_entry *out) {
  cd_device_list list;
  camdelta_status st = cd_enumerate(&list);
  if (st) return st;
  const char *sel = selector;
  if (!sel || !*sel) sel = getenv("CAMDELTA_DEVICE");
  if (!sel || !*sel) {
    for (unsigned i = 0; i < list.count; i++)
      if (list.entries[i].type & CL_DEVICE_TYPE_GPU) {
        *out = list.entries[i];
        return CAMDELTA_OK;
      }
    *out = list.entries[0];
    return CAMDELTA_OK;
  }
  unsigned pi, di;
  char tail;
  if (sscanf(sel, "%u:%u%c", &pi, &di, &tail) == 2) {
    for (unsigned i = 0; i < list.count; i++)
      if (list.entries[i].platform_index == pi && list.entries[i].device_index == di) {
        *out = list.entries[i];
        return CAMDELTA_OK;
      }
  } else {
    cl_device_type want = 0;
    if (strcasecmp(sel, "gpu") == 0) want = CL_DEVICE_TYPE_GPU;
    else if (strcasecmp(sel, "cpu") == 0) want = CL_DEVICE_TYPE_CPU;
    else if (strcasecmp(sel, "accelerator") == 0) want = CL_DEVICE_TYPE_ACCELERATOR;
    for (unsigned i = 0; i < list.count; i++) {
      const cd_device_entry *e = &list.entries[i];
      int match = want ? (e->type & want) != 0
                       : icontains(e->platform_name, sel) || icontains(e->platform_vendor, sel) ||
                             icontains(e->device_name, sel) || icontains(e->device_vendor, sel);
      if (match) {
        *out = *e;
        return CAMDELTA_OK;
      }
    }
  }
  char devs[3000];
  describe(&list, devs, sizeof devs);
  return cd_fail(CAMDELTA_ERROR_DEVICE_NOT_FOUND, "no OpenCL device matches '%s'; devices there are:%s", sel, devs);
}

int cd_device_gpu_like(const camdelta_device_info *info) {
  return (info->type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;
}
