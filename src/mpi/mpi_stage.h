/* Shared by the MPI component's sources (src/mpi/): the staging kept per communicator, and the device-to-device
 * transfer over MPI that uses it.
 *
 * Staging (cd_stage): pinned host buffers (clCreateBuffer with CL_MEM_ALLOC_HOST_PTR, mapped once: page-locked
 * memory on NVIDIA, so that reads and writes run as DMA without the driver's bounce copies), device scratch, the
 * scans' per-frame matrices and small host arrays, kept in an attribute of the communicator and grown when a call
 * needs more: nothing is allocated on the call path once a shape has run. One stage per communicator, for one OpenCL context at a time
 * (a call from another context drops the old buffers). Freed when the communicator is freed, by
 * camdelta_mpi_release_staging, or at MPI_Finalize. Calls on one communicator are collective, hence never
 * concurrent: the stage needs no lock (the list of stages, for MPI_Finalize, has one).
 *
 * Transfer (cd_xfer): device regions of this rank go to other ranks' device regions. Each region is split into
 * chunks (a quarter of the region, at least 64 KiB, at most cd_xfer_chunk(), 4 MiB by default); the device→host
 * reads of the chunks are enqueued at once (non-blocking, into pinned staging), every chunk goes out (MPI_Isend) as
 * soon as its read is done, and every received chunk (MPI_Irecv, posted first) is written to the device
 * (non-blocking) as soon as it arrives, so the three legs overlap; one wait for the device at the end. */
#ifndef CD_MPI_STAGE_H
#define CD_MPI_STAGE_H
#include "camdelta_helpers.h"
#include "camdelta_mpi.h"
#include "camdelta_phases.h"

/* pinned host slots */
enum { CD_HOST_SCAN_SEND, CD_HOST_SCAN_RECV, CD_HOST_HALO_SEND, CD_HOST_HALO_RECV, CD_HOST_SMALL, CD_NHOST };
/* device slots: the scan's summaries and incoming states */
enum { CD_DEV_T, CD_DEV_E, CD_DEV_G, CD_DEV_MI, CD_DEV_DMO, CD_DEV_TMP, CD_DEV_ALL, CD_DEV_FIN, CD_NDEV };
/* host arrays (the transfer's bookkeeping and the callers' layouts) */
enum { CD_ARR_XFER, CD_ARR_REQ, CD_ARR_EV, CD_ARR_IDX, CD_ARR_LAYOUT, CD_ARR_LIST, CD_NARR };

typedef struct cd_stage cd_stage;

/** The stage of (comm, ctx), created on first use. Not collective. */
camdelta_status cd_stage_get(MPI_Comm comm, camdelta_context *ctx, cd_stage **out);
/** A pinned, mapped host buffer of at least `bytes` in slot `slot` (its contents are kept only while it does not
 *  grow). */
camdelta_status cd_stage_host(cd_stage *s, int slot, size_t bytes, float **ptr);
/** A device buffer of at least `bytes` in slot `slot`, valid until the slot is asked for more. */
camdelta_status cd_stage_dev(cd_stage *s, int slot, size_t bytes, cl_mem *mem);
/** A host array of at least `bytes` in slot `slot` (NULL when out of memory, with the error set). */
void *cd_stage_arr(cd_stage *s, int slot, size_t bytes);
/** The scans' per-frame matrices (camdelta_phases.h) of ctx, kept with the stage (another ctx gets a new one). */
camdelta_status cd_stage_frames(cd_stage *s, camdelta_context *ctx, camdelta_scan_frames **out);

/* ------------------------------------------------------------------------------------------- transfer */

#define CD_XFER_TAG 25443

/** The chunk size in bytes: option "mpi" CHUNK_BYTES (CAMDELTA_SP_CHUNK_BYTES, read once per process through the
 *  option registry; the tests use small chunks to run the pipeline on small shapes). 0 when that variable does not
 *  parse (the calls then fail with cd_xfer_chunk_error, naming it). Every rank must use the same size: the calls'
 *  descriptors carry it and are checked. */
size_t cd_xfer_chunk(void);
/** Why cd_xfer_chunk is 0 ("" when it is not). */
const char *cd_xfer_chunk_error(void);

/** A device region of this rank: `bytes` from byte `off` of `mem`. */
typedef struct cd_xregion {
  cl_mem mem;
  size_t off, bytes;
} cd_xregion;
/** One message: source region `src` (an index into the sources) to rank `peer`. */
typedef struct cd_xsend {
  int src, peer;
} cd_xsend;
/** One receipt: from rank `peer` into the device region `dst`. */
typedef struct cd_xrecv {
  cd_xregion dst;
  int peer;
} cd_xrecv;

/** Exposed wall-clock parts of a transfer, ms: until every read to the host is done, then until every message
 *  is sent and received, then until the last write to the device is done. */
typedef struct cd_xtime {
  double d2h_ms, mpi_ms, h2d_ms;
} cd_xtime;

/* Matching: the messages from rank a to rank b must be listed on a in the order of their sources (source index
 * ascending) and on b, among its receipts from a, in the same order with the same sizes (MPI keeps the order of
 * messages between two ranks with one tag). */
typedef struct cd_xfer {
  cd_stage *s;
  camdelta_context *ctx;
  MPI_Comm comm;
  int host_send, host_recv; /* pinned slots for the staging */
  const cd_xregion *src;
  int nsrc;
  const cd_xsend *send;
  int nsend;
  const cd_xrecv *recv;
  int nrecv;
  /* internal */
  float *hs, *hr;
  size_t nchunks_src, nreq_send, nreq_recv;
  void *book;
  double t0, tbeg;
  int begun;
} cd_xfer;

/** Local, not collective: stages the sources (non-blocking device→host reads into pinned memory), flushed.
 *  May run before the ranks agree (so that the reads overlap the wait for slower ranks). */
camdelta_status cd_xfer_begin(cd_xfer *x);
/** Run after every rank agreed that all began well (collective over the ranks that exchange): the messages,
 *  and the received chunks written to the device; returns when those writes are done. A failure here still
 *  completes every message (so no rank waits forever) and is returned for the caller's agreement. `t` may be
 *  NULL. */
camdelta_status cd_xfer_end(cd_xfer *x, cd_xtime *t);
/** Waits for reads begun but not ended (a caller that stops after cd_xfer_begin, on a failed agreement). */
void cd_xfer_abandon(cd_xfer *x);

double cd_mpi_now_ms(void);
#endif
