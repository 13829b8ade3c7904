/* Contexts: the device, its queue, and the per-context program table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/device.h"
#include "runtime/internal.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void fill_info(camdelta_context *ctx) {
  camdelta_device_info *in = &ctx->info;
  memset(in, 0, sizeof *in);
#define P_STR(what, field) clGetPlatformInfo(ctx->platform, what, sizeof in->field, in->field, NULL)
#define D_STR(what, field) clGetDeviceInfo(ctx->device, what, sizeof in->field, in->field, NULL)
  P_STR(CL_PLATFORM_NAME, platform_name);
  P_STR(CL_PLATFORM_VERSION, platform_version);
  D_STR(CL_DEVICE_NAME, device_name);
  D_STR(CL_DEVICE_VENDOR, device_vendor);
  D_STR(CL_DEVICE_VERSION, device_version);
  D_STR(CL_DRIVER_VERSION, driver_version);
#undef P_STR
#undef D_STR
  in->platform_name[sizeof in->platform_name - 1] = '\0';
  in->platform_version[sizeof in->platform_version - 1] = '\0';
  in->device_name[sizeof in->device_name - 1] = '\0';
  in->device_vendor[sizeof in->device_vendor - 1] = '\0';
  in->device_version[sizeof in->device_version - 1] = '\0';
  in->driver_version[sizeof in->driver_version - 1] = '\0';
  clGetDeviceInfo(ctx->device, CL_DEVICE_TYPE, sizeof in->type, &in->type, NULL);
  clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof in->max_work_group_size,
                  &in->max_work_group_size, NULL);
  cl_ulong lm = 0, gm = 0;
  cl_uint cu = 0;
  clGetDeviceInfo(ctx->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lm, &lm, NULL);
  clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gm, &gm, NULL);
  clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
  in->local_mem_bytes = lm;
  in->global_mem_bytes = gm;
  in->compute_units = cu;
  ctx->device_extensions[0] = '\0';
  clGetDeviceInfo(ctx->device, CL_DEVICE_EXTENSIONS, sizeof ctx->device_extensions, ctx->device_extensions, NULL);
  ctx->device_extensions[sizeof ctx->device_extensions - 1] = '\0';
  /* A device without fused multiply-add in hardware (CL_FP_FMA absent: Mesa's llvmpipe) runs OpenCL's fma() as an
   * exact software routine tens of times slower than a multiply and an add; its programs are built with
   * CD_SOFT_FMA (cl/common.cl), which makes the kernels' fma() a mad(). */
  cl_device_fp_config fp = 0;
  ctx->soft_fma = clGetDeviceInfo(ctx->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS &&
                  !(fp & CL_FP_FMA);
  /* NVIDIA's OpenCL compiles to PTX and accepts inline PTX assembly. */
  in->nvidia_ptx = strstr(ctx->device_extensions, "cl_nv_") != NULL && strstr(in->platform_name, "NVIDIA") != NULL;
  ctx->real_info = *in;
}

static camdelta_status finish_create(camdelta_context *ctx) {
  if (mtx_init(&ctx->lock, mtx_plain) != thrd_success)
    return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "cannot create a mutex");
  fill_info(ctx);
  size_t resolution = 0;
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_PROFILING_TIMER_RESOLUTION, sizeof resolution, &resolution, NULL) !=
      CL_SUCCESS)
    resolution = 0;
  ctx->kernel_times = ctx->profiling && resolution > 0;
  /* The environment is read once, here, never on the call path. */
  char msg[512];
  cd_opt_clear(&ctx->opts);
  if (cd_opt_read_env(&ctx->opts, msg, sizeof msg)) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s", msg);
  return cd_limits_env(ctx);
}

/* What finish_create allocated, on its failure or at destruction. */
static void free_created(camdelta_context *ctx) {
  if (ctx->release_plans) ctx->release_plans(ctx);
  cd_context_ext_free(ctx);
}

void *cd_context_ext(camdelta_context *ctx, const cd_context_ext_kind *kind) {
  void *state = NULL;
  mtx_lock(&ctx->lock);
  for (int i = 0; i < CD_CONTEXT_EXT_SLOTS && !state; i++)
    if (ctx->ext[i].kind == kind) {
      state = ctx->ext[i].state;
    } else if (!ctx->ext[i].kind) {
      if ((state = calloc(1, kind->size))) ctx->ext[i].kind = kind, ctx->ext[i].state = state;
      break;
    }
  mtx_unlock(&ctx->lock);
  return state;
}

void *cd_context_ext_find(const camdelta_context *ctx, const cd_context_ext_kind *kind) {
  camdelta_context *c = (camdelta_context *)ctx; /* the lock is the one mutable part of a const context */
  void *state = NULL;
  mtx_lock(&c->lock);
  for (int i = 0; i < CD_CONTEXT_EXT_SLOTS && !state; i++)
    if (c->ext[i].kind == kind) state = c->ext[i].state;
  mtx_unlock(&c->lock);
  return state;
}

void cd_context_ext_free(camdelta_context *ctx) {
  for (int i = 0; i < CD_CONTEXT_EXT_SLOTS && ctx->ext[i].kind; i++) {
    if (ctx->ext[i].kind->fini) ctx->ext[i].kind->fini(ctx->ext[i].state);
    free(ctx->ext[i].state);
    ctx->ext[i].kind = NULL, ctx->ext[i].state = NULL;
  }
}

camdelta_status camdelta_context_create(camdelta_context **out, const char *selector) {
  cd_clear_error();
  if (!out) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_context_create: 'out' is NULL");
  *out = NULL;
  cd_device_entry dev;
  camdelta_status st = cd_select_device(selector, &dev);
  if (st) return st;
  camdelta_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "camdelta_context_create: out of host memory");
  ctx->platform = dev.platform;
  ctx->device = dev.device;
  ctx->owns = 1;
  ctx->profiling = 1;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dev.platform, 0};
  cl_int err;
  ctx->context = clCreateContext(props, 1, &dev.device, NULL, NULL, &err);
  if (err != CL_SUCCESS) {
    free(ctx);
    return cd_cl_fail(err, "clCreateContext");
  }
  ctx->queue = clCreateCommandQueue(ctx->context, dev.device, CL_QUEUE_PROFILING_ENABLE, &err);
  if (err != CL_SUCCESS) {
    clReleaseContext(ctx->context);
    free(ctx);
    return cd_cl_fail(err, "clCreateCommandQueue");
  }
  st = finish_create(ctx);
  if (st) {
    free_created(ctx);
    clReleaseCommandQueue(ctx->queue);
    clReleaseContext(ctx->context);
    free(ctx);
    return st;
  }
  *out = ctx;
  return CAMDELTA_OK;
}

camdelta_status camdelta_context_create_from_queue(camdelta_context **out, cl_context context,
                                                   cl_command_queue queue) {
  cd_clear_error();
  if (!out) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_context_create_from_queue: 'out' is NULL");
  *out = NULL;
  if (!context || !queue)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_context_create_from_queue: '%s' is NULL",
                   context ? "queue" : "context");
  cl_context qctx = NULL;
  cl_device_id dev = NULL;
  cl_command_queue_properties qp = 0;
  cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
  if (err == CL_SUCCESS) err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  if (err == CL_SUCCESS) err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof qp, &qp, NULL);
  if (err != CL_SUCCESS) return cd_cl_fail(err, "camdelta_context_create_from_queue: querying the queue");
  if (qctx != context)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "camdelta_context_create_from_queue: the queue does not belong to the given context");
  if (qp & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT,
                   "camdelta_context_create_from_queue: the queue must be in-order (camdelta relies on ordering)");
  camdelta_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "camdelta_context_create_from_queue: out of host memory");
  ctx->device = dev;
  clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof ctx->platform, &ctx->platform, NULL);
  ctx->context = context;
  ctx->queue = queue;
  ctx->owns = 0;
  ctx->profiling = (qp & CL_QUEUE_PROFILING_ENABLE) != 0;
  clRetainContext(context);
  clRetainCommandQueue(queue);
  camdelta_status st = finish_create(ctx);
  if (st) {
    free_created(ctx);
    clReleaseCommandQueue(queue);
    clReleaseContext(context);
    free(ctx);
    return st;
  }
  *out = ctx;
  return CAMDELTA_OK;
}

void camdelta_context_destroy(camdelta_context *ctx) {
  if (!ctx) return;
  if (ctx->queue) clFinish(ctx->queue);
  free_created(ctx);
  cd_program_entry *e = ctx->programs;
  while (e) {
    cd_program_entry *next = e->next;
    clReleaseProgram(e->program);
    free(e->key);
    free(e);
    e = next;
  }
  if (ctx->queue) clReleaseCommandQueue(ctx->queue);
  if (ctx->context) clReleaseContext(ctx->context);
  mtx_destroy(&ctx->lock);
  free(ctx);
}

uint32_t cd_option(const camdelta_context *ctx, cd_opt_id id, camdelta_dtype dtype) {
  return cd_opt_get(&ctx->opts, id, cd_device_gpu_like(&ctx->info), dtype != CAMDELTA_F32);
}

cl_context camdelta_context_cl_context(const camdelta_context *ctx) { return ctx ? ctx->context : NULL; }
cl_command_queue camdelta_context_queue(const camdelta_context *ctx) { return ctx ? ctx->queue : NULL; }
cl_device_id camdelta_context_device(const camdelta_context *ctx) { return ctx ? ctx->device : NULL; }

camdelta_status camdelta_context_info(const camdelta_context *ctx, camdelta_device_info *info) {
  cd_clear_error();
  if (!ctx || !info)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_context_info: '%s' is NULL", ctx ? "info" : "ctx");
  *info = ctx->info;
  return CAMDELTA_OK;
}

camdelta_status camdelta_finish(camdelta_context *ctx) {
  cd_clear_error();
  if (!ctx) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_finish: 'ctx' is NULL");
  cl_int err = clFinish(ctx->queue);
  if (err != CL_SUCCESS) return cd_cl_fail(err, "clFinish");
  return CAMDELTA_OK;
}

camdelta_status camdelta_enqueue_marker(camdelta_context *ctx, cl_event *event) {
  cd_clear_error();
  if (event) *event = NULL;
  if (!ctx || !event)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_enqueue_marker: '%s' is NULL", ctx ? "event" : "ctx");
  /* the queue is in order (checked when a borrowed queue is handed over): the marker completes after every
   * command enqueued before it */
  cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event);
  if (err != CL_SUCCESS) {
    *event = NULL;
    return cd_cl_fail(err, "camdelta_enqueue_marker: clEnqueueMarkerWithWaitList");
  }
  /* Another queue may wait on the event only once this queue has been flushed (OpenCL's rule for events across
   * queues): a driver that submits lazily (Mesa's Rusticl) would otherwise never run the commands it waits for. */
  err = clFlush(ctx->queue);
  if (err != CL_SUCCESS) {
    clReleaseEvent(*event);
    *event = NULL;
    return cd_cl_fail(err, "camdelta_enqueue_marker: clFlush");
  }
  return CAMDELTA_OK;
}

camdelta_status camdelta_context_build_stats(const camdelta_context *ctx, camdelta_build_stats *stats) {
  cd_clear_error();
  if (!ctx || !stats)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_context_build_stats: '%s' is NULL",
                   ctx ? "stats" : "ctx");
  mtx_lock((mtx_t *)&ctx->lock);
  *stats = ctx->stats;
  mtx_unlock((mtx_t *)&ctx->lock);
  return CAMDELTA_OK;
}

camdelta_status camdelta_cache_dir(char *buf, size_t size) {
  cd_clear_error();
  if (!buf || size == 0) return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_cache_dir: 'buf' is NULL or empty");
  char tmp[4096];
  if (!cd_cache_effective_folder(tmp, sizeof tmp)) tmp[0] = '\0';
  if (strlen(tmp) + 1 > size)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_cache_dir: buffer of %zu bytes too small", size);
  strcpy(buf, tmp);
  return CAMDELTA_OK;
}

/* ------------------------------------------------------------ programs */

static camdelta_status build_log(camdelta_context *ctx, cl_program prog, const char *source, const char *options) {
  size_t n = 0;
  clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
  char *log = malloc(n + 1);
  if (log) {
    log[0] = '\0';
    clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, n, log, NULL);
    log[n] = '\0';
  }
  camdelta_status st = cd_fail(CAMDELTA_ERROR_BUILD, "building kernel source '%s' with options '%s' for %s failed:\n%s",
                               source, options, ctx->real_info.device_name, log ? log : "(no log)");
  free(log);
  return st;
}

static camdelta_status compose(const char *source, char **text, size_t *len) {
  const char *common, *body;
  size_t clen, blen;
  char *owned_c = NULL, *owned_b = NULL;
  camdelta_status st = cd_kernel_source("common.cl", &common, &clen, &owned_c);
  if (st) return st;
  st = cd_kernel_source(source, &body, &blen, &owned_b);
  if (st) {
    free(owned_c);
    return st;
  }
  static const char sep[] = "\n#line 1\n";
  *len = clen + sizeof sep - 1 + blen;
  *text = malloc(*len + 1);
  if (*text) {
    memcpy(*text, common, clen);
    memcpy(*text + clen, sep, sizeof sep - 1);
    memcpy(*text + clen + sizeof sep - 1, body, blen);
    (*text)[*len] = '\0';
  }
  free(owned_c);
  free(owned_b);
  if (!*text) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "out of host memory composing '%s'", source);
  return CAMDELTA_OK;
}

static int cache_on(void) {
  char dir[4096];
  return cd_cache_folder(dir, sizeof dir);
}

static camdelta_status build_program(camdelta_context *ctx, const char *source, const char *options,
                                     cl_program *out, int *from_disk, char key[65]) {
  char *text = NULL;
  size_t len = 0;
  camdelta_status st = compose(source, &text, &len);
  if (st) return st;
  char opts[2048];
  snprintf(opts, sizeof opts, "-cl-std=CL1.2%s %s", ctx->soft_fma ? " -DCD_SOFT_FMA=1" : "", options ? options : "");
  cd_cache_key(ctx, opts, text, len, key);
  *from_disk = 0;
  cl_int err;
  size_t blen = 0;
  unsigned char *bin = cd_cache_load(key, &blen);
  if (bin) {
    const unsigned char *bins[1] = {bin};
    cl_int bstatus = CL_SUCCESS;
    cl_program prog = clCreateProgramWithBinary(ctx->context, 1, &ctx->device, &blen, bins, &bstatus, &err);
    free(bin);
    if (err == CL_SUCCESS && bstatus == CL_SUCCESS) {
      err = clBuildProgram(prog, 1, &ctx->device, opts, NULL, NULL);
      if (err == CL_SUCCESS) {
        free(text);
        *out = prog;
        *from_disk = 1;
        return CAMDELTA_OK;
      }
    }
    if (prog) clReleaseProgram(prog);
    /* unusable binary: rebuild from source below and overwrite the entry */
  }
  const char *srcs[1] = {text};
  cl_program prog = clCreateProgramWithSource(ctx->context, 1, srcs, &len, &err);
  if (err != CL_SUCCESS) {
    free(text);
    return cd_cl_fail(err, "clCreateProgramWithSource");
  }
  err = clBuildProgram(prog, 1, &ctx->device, opts, NULL, NULL);
  free(text);
  if (err != CL_SUCCESS) {
    st = err == CL_BUILD_PROGRAM_FAILURE ? build_log(ctx, prog, source, opts) : cd_cl_fail(err, "clBuildProgram");
    clReleaseProgram(prog);
    return st;
  }
  size_t bsize = 0;
  /* fetching a binary costs time on some drivers: only when it will be kept */
  if (cache_on() &&
      clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof bsize, &bsize, NULL) == CL_SUCCESS && bsize > 0) {
    unsigned char *b = malloc(bsize);
    unsigned char *bp[1] = {b};
    if (b && clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bp, bp, NULL) == CL_SUCCESS)
      cd_cache_store(key, b, bsize, ctx->real_info.device_name);
    free(b);
  }
  *out = prog;
  return CAMDELTA_OK;
}

camdelta_status cd_program(camdelta_context *ctx, const char *source, const char *options, cl_program *out) {
  size_t klen = strlen(source) + 1 + strlen(options ? options : "") + 1;
  char *key = malloc(klen);
  if (!key) return cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "out of host memory");
  snprintf(key, klen, "%s\n%s", source, options ? options : "");
  mtx_lock(&ctx->lock);
  for (cd_program_entry *e = ctx->programs; e; e = e->next) {
    if (strcmp(e->key, key) == 0) {
      *out = e->program;
      mtx_unlock(&ctx->lock);
      free(key);
      return CAMDELTA_OK;
    }
  }
  double t0 = now_ms();
  int from_disk = 0;
  cl_program prog = NULL;
  char ckey[65];
  camdelta_status st = build_program(ctx, source, options, &prog, &from_disk, ckey);
  if (st == CAMDELTA_OK) {
    cd_program_entry *e = malloc(sizeof *e);
    if (!e) {
      clReleaseProgram(prog);
      st = cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "out of host memory");
    } else {
      e->key = key;
      key = NULL;
      e->program = prog;
      e->from_disk = from_disk;
      memcpy(e->cache_key, ckey, sizeof ckey);
      e->next = ctx->programs;
      ctx->programs = e;
      ctx->stats.programs++;
      if (from_disk) ctx->stats.from_disk++;
      else ctx->stats.compiled++;
      ctx->stats.last_from_disk = from_disk;
      ctx->stats.last_setup_ms = now_ms() - t0;
      *out = prog;
    }
  }
  mtx_unlock(&ctx->lock);
  free(key);
  return st;
}

/* Drops `prog` from the table and its disk entry when it was loaded from disk; 1 when it did. */
static int forget_disk_program(camdelta_context *ctx, cl_program prog) {
  int done = 0;
  mtx_lock(&ctx->lock);
  for (cd_program_entry *e = ctx->programs; e; e = e->next) {
    if (e->program != prog || !e->from_disk) continue;
    cd_cache_discard(e->cache_key);
    /* retired, not released: another thread may still hold it; it never matches a lookup again and is released
     * with the context */
    e->key[0] = '\0';
    e->from_disk = 0;
    done = 1;
    break;
  }
  mtx_unlock(&ctx->lock);
  return done;
}

camdelta_status cd_kernel(camdelta_context *ctx, const char *source, const char *options, const char *name,
                          cl_kernel *out) {
  cl_program prog;
  camdelta_status st = cd_program(ctx, source, options, &prog);
  if (st) return st;
  cl_int err;
  *out = clCreateKernel(prog, name, &err);
  if (err == CL_INVALID_KERNEL_NAME && forget_disk_program(ctx, prog)) {
    /* a cached binary that verified but lacks the kernel (another program's payload): discarded, rebuilt */
    if ((st = cd_program(ctx, source, options, &prog))) return st;
    *out = clCreateKernel(prog, name, &err);
  }
  if (err != CL_SUCCESS) {
    *out = NULL;
    return cd_fail(CAMDELTA_ERROR_BUILD, "kernel '%s' not found in '%s': %s", name, source,
                   camdelta_cl_error_name(err));
  }
  return CAMDELTA_OK;
}
