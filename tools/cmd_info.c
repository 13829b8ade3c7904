/* camdelta info: platforms, devices, the chosen device, cache folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"
#include "usage.h"

#define INFO_MAX_PLATFORMS 32
#define INFO_MAX_DEVICES 64

static void platform_str(cl_platform_id p, cl_platform_info what, char *buf, size_t size) {
  buf[0] = '\0';
  if (clGetPlatformInfo(p, what, size, buf, NULL) != CL_SUCCESS) snprintf(buf, size, "?");
  buf[size - 1] = '\0';
}

static void device_str(cl_device_id d, cl_device_info what, char *buf, size_t size) {
  buf[0] = '\0';
  if (clGetDeviceInfo(d, what, size, buf, NULL) != CL_SUCCESS) snprintf(buf, size, "?");
  buf[size - 1] = '\0';
}

static const char *type_str(cl_device_type t) {
  if (t & CL_DEVICE_TYPE_GPU) return "GPU";
  if (t & CL_DEVICE_TYPE_CPU) return "CPU";
  if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  if (t & CL_DEVICE_TYPE_CUSTOM) return "custom";
  return "other";
}

static const char *bytes_str(uint64_t b, char *buf, size_t size) {
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0) snprintf(buf, size, "%llu B", (unsigned long long)b);
  else snprintf(buf, size, "%.1f %s", v, unit[u]);
  return buf;
}

/* Print a space-separated list wrapped at ~100 columns, indented. */
static void print_wrapped(const char *list, const char *indent) {
  size_t col = 0;
  const char *p = list;
  while (*p) {
    while (*p == ' ') p++;
    if (!*p) break;
    size_t n = strcspn(p, " ");
    if (col == 0) {
      col = strlen(indent);
      fputs(indent, stdout);
    } else if (col + 1 + n > 100) {
      fputc('\n', stdout);
      col = strlen(indent);
      fputs(indent, stdout);
    } else {
      fputc(' ', stdout);
      col++;
    }
    fwrite(p, 1, n, stdout);
    col += n;
    p += n;
  }
  if (col) fputc('\n', stdout);
}

int cmd_info(int argc, char **argv) {
  cli_args a = {argc, argv, 0};
  const char *selector = NULL;
  while (a.i < a.argc) {
    int r;
    if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
      usage_info();
      return CLI_EXIT_OK;
    }
    if ((r = cli_value(&a, "--device", &selector))) {
      if (r < 0) return CLI_EXIT_USAGE;
      continue;
    }
    return cli_error(CLI_EXIT_USAGE, "info: unknown option '%s' (see 'camdelta help info')", a.argv[a.i]);
  }

  printf("camdelta %s\n", camdelta_version_string());
  char cache[4096];
  camdelta_status cst = camdelta_cache_dir(cache, sizeof cache);
  const char *cache_line = cst != CAMDELTA_OK ? "(unknown)"
                           : cache[0]         ? cache
                                              : "off (CAMDELTA_CACHE=0 or no home folder)";

  cl_platform_id plats[INFO_MAX_PLATFORMS];
  cl_uint np = 0;
  cl_int err = clGetPlatformIDs(INFO_MAX_PLATFORMS, plats, &np);
  if (err != CL_SUCCESS || np == 0) {
    printf("no OpenCL platform found (%s)\n", camdelta_cl_error_name(err));
    printf("cache folder: %s\n", cache_line);
    return cli_error(CLI_EXIT_DEVICE, "no OpenCL platform found; is an OpenCL driver (ICD) installed?");
  }
  if (np > INFO_MAX_PLATFORMS) np = INFO_MAX_PLATFORMS;

  camdelta_context *ctx = NULL;
  camdelta_status st = camdelta_context_create(&ctx, selector);
  cl_device_id chosen = st == CAMDELTA_OK ? camdelta_context_device(ctx) : NULL;
  char chosen_index[32] = "";

  for (cl_uint p = 0; p < np; p++) {
    char name[256], vendor[256], ver[256];
    platform_str(plats[p], CL_PLATFORM_NAME, name, sizeof name);
    platform_str(plats[p], CL_PLATFORM_VENDOR, vendor, sizeof vendor);
    platform_str(plats[p], CL_PLATFORM_VERSION, ver, sizeof ver);
    printf("platform %u: %s\n  vendor: %s\n  version: %s\n", (unsigned)p, name, vendor, ver);
    cl_device_id devs[INFO_MAX_DEVICES];
    cl_uint nd = 0;
    err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, INFO_MAX_DEVICES, devs, &nd);
    if (err != CL_SUCCESS || nd == 0) {
      printf("  no devices (%s)\n", camdelta_cl_error_name(err));
      continue;
    }
    if (nd > INFO_MAX_DEVICES) nd = INFO_MAX_DEVICES;
    for (cl_uint d = 0; d < nd; d++) {
      char dname[256], dvendor[256], dver[256], drv[256], b1[64], b2[64];
      cl_device_type type = 0;
      cl_uint cus = 0;
      cl_ulong gmem = 0, lmem = 0;
      size_t wg = 0;
      device_str(devs[d], CL_DEVICE_NAME, dname, sizeof dname);
      device_str(devs[d], CL_DEVICE_VENDOR, dvendor, sizeof dvendor);
      device_str(devs[d], CL_DEVICE_VERSION, dver, sizeof dver);
      device_str(devs[d], CL_DRIVER_VERSION, drv, sizeof drv);
      clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gmem, &gmem, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL);
      clGetDeviceInfo(devs[d], CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
      int is_chosen = chosen && devs[d] == chosen;
      if (is_chosen) snprintf(chosen_index, sizeof chosen_index, "%u:%u", (unsigned)p, (unsigned)d);
      printf("  device %u:%u: %s%s\n", (unsigned)p, (unsigned)d, dname, is_chosen ? "  [chosen]" : "");
      printf("    vendor: %s\n    type: %s\n    version: %s\n    driver: %s\n", dvendor, type_str(type), dver, drv);
      printf("    compute units: %u\n    global memory: %s\n    local memory: %s\n    max work-group size: %zu\n",
             (unsigned)cus, bytes_str(gmem, b1, sizeof b1), bytes_str(lmem, b2, sizeof b2), wg);
    }
  }

  if (st != CAMDELTA_OK) {
    printf("chosen device: none\n");
    printf("cache folder: %s\n", cache_line);
    fflush(stdout);
    return cli_device_error(st, selector); /* the library's message lists the devices */
  }
  camdelta_device_info info;
  if (camdelta_context_info(ctx, &info) == CAMDELTA_OK) {
    printf("chosen device: %s %s (%s; selector: %s)\n", chosen_index[0] ? chosen_index : "?", info.device_name,
           info.platform_name, selector ? selector : getenv("CAMDELTA_DEVICE") ? getenv("CAMDELTA_DEVICE") : "default");
    printf("  NVIDIA inline PTX paths: %s\n", info.nvidia_ptx ? "available" : "no");
  }
  size_t ext_len = 0;
  if (clGetDeviceInfo(chosen, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_len) == CL_SUCCESS && ext_len > 0) {
    char *ext = malloc(ext_len + 1);
    if (ext && clGetDeviceInfo(chosen, CL_DEVICE_EXTENSIONS, ext_len, ext, NULL) == CL_SUCCESS) {
      ext[ext_len] = '\0';
      printf("  extensions:\n");
      print_wrapped(ext, "    ");
    }
    free(ext);
  }
  printf("cache folder: %s\n", cache_line);
  camdelta_context_destroy(ctx);
  return CLI_EXIT_OK;
}
