/* The staging kept per communicator and the pipelined device-to-device transfer over MPI (mpi_stage.h). */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi/mpi_stage.h"
#include "options/options.h"

double cd_mpi_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

struct cd_stage {
  cl_context cl;
  cl_command_queue q; /* retained: unmapping at release needs it */
  struct {
    cl_mem mem;
    float *ptr;
    size_t bytes;
  } host[CD_NHOST];
  struct {
    cl_mem mem;
    size_t bytes;
  } dev[CD_NDEV];
  struct {
    void *p;
    size_t bytes;
  } arr[CD_NARR];
  camdelta_scan_frames *frames; /* the scans' per-frame matrices (camdelta_phases.h), for frames_ctx */
  camdelta_context *frames_ctx;
  struct cd_stage *next; /* the list of live stages (freed at MPI_Finalize) */
};

/* ------------------------------------------------------------------------------------------ lifetime */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cd_stage *g_stages;
static int g_key = MPI_KEYVAL_INVALID, g_self_key = MPI_KEYVAL_INVALID;

static void drop_buffers(cd_stage *s) {
  for (int i = 0; i < CD_NHOST; i++) {
    if (s->host[i].mem) {
      if (s->host[i].ptr) clEnqueueUnmapMemObject(s->q, s->host[i].mem, s->host[i].ptr, 0, NULL, NULL);
      clFinish(s->q);
      clReleaseMemObject(s->host[i].mem);
    }
    s->host[i].mem = NULL, s->host[i].ptr = NULL, s->host[i].bytes = 0;
  }
  for (int i = 0; i < CD_NDEV; i++) {
    if (s->dev[i].mem) clReleaseMemObject(s->dev[i].mem);
    s->dev[i].mem = NULL, s->dev[i].bytes = 0;
  }
  camdelta_scan_frames_destroy(s->frames);
  s->frames = NULL, s->frames_ctx = NULL;
  if (s->q) clReleaseCommandQueue(s->q);
  if (s->cl) clReleaseContext(s->cl);
  s->q = NULL, s->cl = NULL;
}

static void stage_free(cd_stage *s) {
  drop_buffers(s);
  for (int i = 0; i < CD_NARR; i++) free(s->arr[i].p);
  free(s);
}

/* Unlinks s from the live list; 0 when it was not there (already freed). */
static int unlink_stage(cd_stage *s) {
  pthread_mutex_lock(&g_lock);
  int found = 0;
  for (cd_stage **p = &g_stages; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next, found = 1;
      break;
    }
  pthread_mutex_unlock(&g_lock);
  return found;
}

/* The communicator's attribute: its stage goes with it (unless MPI_Finalize freed it first). */
static int delete_stage(MPI_Comm comm, int key, void *value, void *extra) {
  (void)comm, (void)key, (void)extra;
  if (value && unlink_stage(value)) stage_free(value);
  return MPI_SUCCESS;
}

/* MPI_COMM_SELF's attribute, deleted first at MPI_Finalize: every stage still alive. */
static int delete_all(MPI_Comm comm, int key, void *value, void *extra) {
  (void)comm, (void)key, (void)value, (void)extra;
  pthread_mutex_lock(&g_lock);
  cd_stage *s = g_stages;
  g_stages = NULL;
  pthread_mutex_unlock(&g_lock);
  while (s) {
    cd_stage *n = s->next;
    stage_free(s);
    s = n;
  }
  return MPI_SUCCESS;
}

static camdelta_status keys(void) {
  if (g_key != MPI_KEYVAL_INVALID) return CAMDELTA_OK;
  if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_stage, &g_key, NULL) != MPI_SUCCESS ||
      MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_all, &g_self_key, NULL) != MPI_SUCCESS ||
      MPI_Comm_set_attr(MPI_COMM_SELF, g_self_key, NULL) != MPI_SUCCESS)
    return camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "MPI: cannot create the staging's attribute keys");
  return CAMDELTA_OK;
}

camdelta_status cd_stage_get(MPI_Comm comm, camdelta_context *ctx, cd_stage **out) {
  *out = NULL;
  camdelta_status st = keys();
  if (st) return st;
  void *v = NULL;
  int flag = 0;
  MPI_Comm_get_attr(comm, g_key, &v, &flag);
  cd_stage *s = flag ? v : NULL;
  const cl_context cl = camdelta_context_cl_context(ctx);
  const cl_command_queue q = camdelta_context_queue(ctx);
  if (!s) {
    if (!(s = calloc(1, sizeof *s)))
      return camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "MPI staging: out of host memory");
    if (MPI_Comm_set_attr(comm, g_key, s) != MPI_SUCCESS) {
      free(s);
      return camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "MPI: cannot set the staging's attribute");
    }
    pthread_mutex_lock(&g_lock);
    s->next = g_stages, g_stages = s;
    pthread_mutex_unlock(&g_lock);
  }
  if (s->cl != cl || s->q != q) { /* another context: its buffers would not do */
    drop_buffers(s);
    clRetainContext(cl), clRetainCommandQueue(q);
    s->cl = cl, s->q = q;
  }
  *out = s;
  return CAMDELTA_OK;
}

camdelta_status cd_stage_frames(cd_stage *s, camdelta_context *ctx, camdelta_scan_frames **out) {
  if (s->frames && s->frames_ctx != ctx) {
    camdelta_scan_frames_destroy(s->frames);
    s->frames = NULL, s->frames_ctx = NULL;
  }
  if (!s->frames) {
    const camdelta_status st = camdelta_scan_frames_create(ctx, &s->frames);
    if (st) return st;
    s->frames_ctx = ctx;
  }
  *out = s->frames;
  return CAMDELTA_OK;
}

camdelta_status camdelta_mpi_release_staging(MPI_Comm comm) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized || comm == MPI_COMM_NULL || g_key == MPI_KEYVAL_INVALID) return CAMDELTA_OK;
  void *v = NULL;
  int flag = 0;
  MPI_Comm_get_attr(comm, g_key, &v, &flag);
  if (flag && v) MPI_Comm_delete_attr(comm, g_key); /* delete_stage frees it */
  return CAMDELTA_OK;
}

static camdelta_status cl_fail(cl_int err, const char *what, size_t bytes) {
  return camdelta_set_error(err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
                                    err == CL_OUT_OF_HOST_MEMORY || err == CL_INVALID_BUFFER_SIZE
                                ? CAMDELTA_ERROR_OUT_OF_MEMORY
                                : CAMDELTA_ERROR_OPENCL,
                            "MPI staging: %s of %zu bytes: %s", what, bytes, camdelta_cl_error_name(err));
}

/* Sizes grow by at least an eighth, so that shapes growing a little do not reallocate every call. */
static size_t grown(size_t have, size_t need) {
  size_t more;
  if (!camdelta_size_add(&more, have, have / 8)) more = need; /* no growth past size_t */
  return need > more ? need : more;
}

camdelta_status cd_stage_host(cd_stage *s, int slot, size_t bytes, float **ptr) {
  if (!bytes) bytes = 4;
  if (s->host[slot].bytes < bytes) {
    const size_t n = grown(s->host[slot].bytes, bytes);
    if (s->host[slot].mem) {
      clEnqueueUnmapMemObject(s->q, s->host[slot].mem, s->host[slot].ptr, 0, NULL, NULL);
      clFinish(s->q);
      clReleaseMemObject(s->host[slot].mem);
      s->host[slot].mem = NULL, s->host[slot].ptr = NULL, s->host[slot].bytes = 0;
    }
    cl_int err;
    cl_mem m = clCreateBuffer(s->cl, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
    if (err != CL_SUCCESS) return cl_fail(err, "a pinned host buffer", n);
    void *p = clEnqueueMapBuffer(s->q, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, n, 0, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
      clReleaseMemObject(m);
      return cl_fail(err, "mapping a pinned host buffer", n);
    }
    s->host[slot].mem = m, s->host[slot].ptr = p, s->host[slot].bytes = n;
  }
  *ptr = s->host[slot].ptr;
  return CAMDELTA_OK;
}

camdelta_status cd_stage_dev(cd_stage *s, int slot, size_t bytes, cl_mem *mem) {
  if (!bytes) bytes = 4;
  if (s->dev[slot].bytes < bytes) {
    if (s->dev[slot].mem) clReleaseMemObject(s->dev[slot].mem);
    s->dev[slot].mem = NULL, s->dev[slot].bytes = 0;
    cl_int err;
    cl_mem m = clCreateBuffer(s->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) return cl_fail(err, "a device buffer", bytes);
    s->dev[slot].mem = m, s->dev[slot].bytes = bytes;
  }
  *mem = s->dev[slot].mem;
  return CAMDELTA_OK;
}

void *cd_stage_arr(cd_stage *s, int slot, size_t bytes) {
  if (!bytes) bytes = 8;
  if (s->arr[slot].bytes < bytes) {
    const size_t n = grown(s->arr[slot].bytes, bytes);
    void *p = realloc(s->arr[slot].p, n);
    if (!p) {
      camdelta_set_error(CAMDELTA_ERROR_OUT_OF_MEMORY, "MPI staging: out of host memory");
      return NULL;
    }
    s->arr[slot].p = p, s->arr[slot].bytes = n;
  }
  return s->arr[slot].p;
}

/* ------------------------------------------------------------------------------------------ transfer */

size_t cd_xfer_chunk(void) {
  uint32_t v = 0;
  char msg[256];
  return cd_opt_process(CD_OPT_MPI_CHUNK_BYTES, &v, msg, sizeof msg) ? 0 : v;
}

const char *cd_xfer_chunk_error(void) {
  static _Thread_local char msg[256];
  uint32_t v;
  if (!cd_opt_process(CD_OPT_MPI_CHUNK_BYTES, &v, msg, sizeof msg)) msg[0] = '\0';
  return msg;
}

#define CHUNK cd_xfer_chunk()
/* A region's chunk: a quarter of it rounded up to 4 KiB, at least 64 KiB, at most CHUNK, so that a region of a few
 * MB (the scan's summaries: 1 MB at D=112, H=20) still runs its legs overlapped. The same on both sides of a
 * message (a function of its size and CHUNK only). */
static size_t csize(size_t bytes) {
  size_t q = (bytes / 4 + 4095) / 4096 * 4096;
  if (q < 65536) q = 65536;
  return q < CHUNK ? q : CHUNK;
}
static size_t nchunks(size_t bytes) { return (bytes + csize(bytes) - 1) / csize(bytes); }
static size_t chunk_len(size_t bytes, size_t j) {
  const size_t c = csize(bytes), rest = bytes - j * c;
  return rest < c ? rest : c;
}

/* The bookkeeping in the stage's arrays (CD_ARR_XFER): staging offsets and first chunk of every source and
 * receipt; CD_ARR_IDX: the receipt of each receive chunk, then MPI_Testsome's indices. */
typedef struct book {
  size_t *soff, *sfirst, *roff, *rfirst;
} book;

camdelta_status cd_xfer_begin(cd_xfer *x) {
  x->begun = 0, x->t0 = cd_mpi_now_ms();
  if (!CHUNK)
    return camdelta_set_error(CAMDELTA_ERROR_INVALID_ARGUMENT, "%s", cd_xfer_chunk_error());
  const int ns = x->nsrc, nr = x->nrecv;
  size_t sbytes = 0, rbytes = 0;
  x->nchunks_src = x->nreq_send = x->nreq_recv = 0;
  for (int i = 0; i < ns; i++) sbytes += x->src[i].bytes, x->nchunks_src += nchunks(x->src[i].bytes);
  for (int i = 0; i < x->nsend; i++) x->nreq_send += nchunks(x->src[x->send[i].src].bytes);
  for (int i = 0; i < nr; i++) rbytes += x->recv[i].dst.bytes, x->nreq_recv += nchunks(x->recv[i].dst.bytes);
  for (int i = 0; i < nr; i++)
    if (x->recv[i].dst.bytes && nchunks(x->recv[i].dst.bytes) > (size_t)INT32_MAX / 2)
      return camdelta_set_error(CAMDELTA_ERROR_UNSUPPORTED, "MPI transfer: too many chunks");
  /* bookkeeping: size_t x (2 ns + 2 nr), int x 2 nreq_recv, events, requests */
  size_t *z = cd_stage_arr(x->s, CD_ARR_XFER, (2 * (size_t)ns + 2 * (size_t)nr + 1) * sizeof(size_t));
  int *iv = cd_stage_arr(x->s, CD_ARR_IDX, (2 * x->nreq_recv + 1) * sizeof(int));
  cl_event *ev = cd_stage_arr(x->s, CD_ARR_EV, (x->nchunks_src + 1) * sizeof(cl_event));
  MPI_Request *rq = cd_stage_arr(x->s, CD_ARR_REQ, (x->nreq_send + x->nreq_recv + 1) * sizeof(MPI_Request));
  if (!z || !iv || !ev || !rq) return CAMDELTA_ERROR_OUT_OF_MEMORY; /* the message is set */
  camdelta_status st = cd_stage_host(x->s, x->host_send, sbytes, &x->hs);
  if (!st) st = cd_stage_host(x->s, x->host_recv, rbytes, &x->hr);
  if (st) return st;
  book bk, *b = &bk;
  b->soff = z, b->sfirst = z + ns, b->roff = z + 2 * ns, b->rfirst = z + 2 * ns + nr;
  size_t o = 0, c = 0;
  for (int i = 0; i < ns; i++) b->soff[i] = o, b->sfirst[i] = c, o += x->src[i].bytes, c += nchunks(x->src[i].bytes);
  o = 0, c = 0;
  for (int i = 0; i < nr; i++) {
    b->roff[i] = o, b->rfirst[i] = c;
    for (size_t j = 0; j < nchunks(x->recv[i].dst.bytes); j++) iv[c + j] = i;
    o += x->recv[i].dst.bytes, c += nchunks(x->recv[i].dst.bytes);
  }
  /* the reads, one event per chunk */
  const cl_command_queue q = camdelta_context_queue(x->ctx);
  size_t k = 0;
  for (int i = 0; i < ns && !st; i++)
    for (size_t j = 0; j < nchunks(x->src[i].bytes) && !st; j++, k++) {
      const size_t at = j * csize(x->src[i].bytes), len = chunk_len(x->src[i].bytes, j);
      const cl_int err = clEnqueueReadBuffer(q, x->src[i].mem, CL_FALSE, x->src[i].off + at, len,
                                             (char *)x->hs + b->soff[i] + at, 0, NULL, &ev[k]);
      if (err != CL_SUCCESS) {
        st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "MPI transfer: reading a region to the host: %s",
                                camdelta_cl_error_name(err));
        break;
      }
    }
  if (k) clFlush(q);
  x->nchunks_src = k; /* only the reads enqueued have events (all of them unless st) */
  x->begun = 1;
  x->tbeg = cd_mpi_now_ms() - x->t0;
  return st;
}

void cd_xfer_abandon(cd_xfer *x) {
  if (!x->begun) return;
  cl_event *ev = cd_stage_arr(x->s, CD_ARR_EV, 1);
  if (ev && x->nchunks_src) {
    clWaitForEvents((cl_uint)x->nchunks_src, ev);
    for (size_t k = 0; k < x->nchunks_src; k++) clReleaseEvent(ev[k]);
  }
  x->begun = 0, x->nchunks_src = 0;
}

camdelta_status cd_xfer_end(cd_xfer *x, cd_xtime *t) {
  const double t1 = cd_mpi_now_ms();
  camdelta_status st = CAMDELTA_OK;
  const int ns = x->nsrc, nr = x->nrecv;
  /* the arrays were sized by cd_xfer_begin: asking for one byte returns them unchanged */
  size_t *z = cd_stage_arr(x->s, CD_ARR_XFER, 1);
  int *iv = cd_stage_arr(x->s, CD_ARR_IDX, 1);
  cl_event *ev = cd_stage_arr(x->s, CD_ARR_EV, 1);
  MPI_Request *rq = cd_stage_arr(x->s, CD_ARR_REQ, 1);
  const size_t *soff = z, *roff = z + 2 * ns, *rfirst = z + 2 * ns + nr;
  int *owner = iv, *idx = iv + x->nreq_recv;
  MPI_Request *sreq = rq, *rreq = rq + x->nreq_send;
  const cl_command_queue q = camdelta_context_queue(x->ctx);
  /* receives first, in the order of the receipts and their chunks */
  size_t r = 0;
  for (int i = 0; i < nr; i++)
    for (size_t j = 0; j < nchunks(x->recv[i].dst.bytes); j++, r++)
      MPI_Irecv((char *)x->hr + roff[i] + j * csize(x->recv[i].dst.bytes), (int)chunk_len(x->recv[i].dst.bytes, j), MPI_BYTE,
                x->recv[i].peer, CD_XFER_TAG, x->comm, &rreq[r]);
  /* then poll: a source chunk whose read is done goes to every peer of that source; a received chunk is written
   * to the device */
  size_t next = 0, posted = 0, done = 0, src_i = 0, src_j = 0;
  double t_d2h = next >= x->nchunks_src ? cd_mpi_now_ms() : 0;
  int sends_done = x->nreq_send == 0;
  while (next < x->nchunks_src || done < x->nreq_recv || !sends_done) {
    int progress = 0;
    while (next < x->nchunks_src) {
      cl_int es = CL_COMPLETE;
      const cl_int err = clGetEventInfo(ev[next], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof es, &es, NULL);
      if (err != CL_SUCCESS || es < 0) { /* sent anyway (the peers wait for it); the failure is reported */
        if (!st)
          st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "MPI transfer: a read to the host failed: %s",
                                  camdelta_cl_error_name(err != CL_SUCCESS ? err : es));
        es = CL_COMPLETE;
      }
      if (es != CL_COMPLETE) break;
      while (src_j >= nchunks(x->src[src_i].bytes)) src_i++, src_j = 0;
      const size_t len = chunk_len(x->src[src_i].bytes, src_j);
      for (int m = 0; m < x->nsend; m++)
        if (x->send[m].src == (int)src_i)
          MPI_Isend((char *)x->hs + soff[src_i] + src_j * csize(x->src[src_i].bytes), (int)len, MPI_BYTE, x->send[m].peer,
                    CD_XFER_TAG, x->comm, &sreq[posted++]);
      src_j++, next++, progress = 1;
      if (next == x->nchunks_src) t_d2h = cd_mpi_now_ms();
    }
    if (done < x->nreq_recv) {
      int outc = 0;
      MPI_Testsome((int)x->nreq_recv, rreq, &outc, idx, MPI_STATUSES_IGNORE);
      if (outc != MPI_UNDEFINED && outc > 0) {
        for (int k = 0; k < outc; k++) {
          const int i = owner[idx[k]];
          const size_t j = (size_t)idx[k] - rfirst[i], at = j * csize(x->recv[i].dst.bytes);
          const cl_int err = clEnqueueWriteBuffer(q, x->recv[i].dst.mem, CL_FALSE, x->recv[i].dst.off + at,
                                                  chunk_len(x->recv[i].dst.bytes, j), (char *)x->hr + roff[i] + at,
                                                  0, NULL, NULL);
          if (err != CL_SUCCESS && !st)
            st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "MPI transfer: writing a received chunk: %s",
                                    camdelta_cl_error_name(err));
        }
        clFlush(q);
        done += (size_t)outc, progress = 1;
      }
    }
    if (!sends_done && next >= x->nchunks_src && posted == x->nreq_send) {
      int flag = 0;
      MPI_Testall((int)posted, sreq, &flag, MPI_STATUSES_IGNORE);
      sends_done = flag != 0;
      progress |= sends_done;
    } else if (posted && !sends_done) {
      int flag = 0; /* progress for the sends posted so far */
      MPI_Testall((int)posted, sreq, &flag, MPI_STATUSES_IGNORE);
    }
    if (!progress) sched_yield();
  }
  const double t_mpi = cd_mpi_now_ms();
  for (size_t k = 0; k < x->nchunks_src; k++) clReleaseEvent(ev[k]);
  x->begun = 0;
  if (done) {
    const cl_int err = clFinish(q);
    if (err != CL_SUCCESS && !st)
      st = camdelta_set_error(CAMDELTA_ERROR_OPENCL, "MPI transfer: clFinish: %s", camdelta_cl_error_name(err));
  }
  const double t_end = cd_mpi_now_ms();
  if (t) {
    if (t_d2h < t1) t_d2h = t1;
    if (t_d2h > t_mpi) t_d2h = t_mpi;
    t->d2h_ms = x->tbeg + (t_d2h - t1), t->mpi_ms = t_mpi - t_d2h, t->h2d_ms = t_end - t_mpi;
  }
  return st;
}
