/* Shared by the MPI component's sources (src/mpi/): the collective error agreement. */
#ifndef CD_MPI_AGREE_H
#define CD_MPI_AGREE_H
#include "camdelta_mpi.h"

/** Collective over comm: every rank learns whether any rank failed, then all return the first failing rank's
 *  status and message, prefixed "rank R of P: " (a message that already names its rank is passed on as is).
 *  CAMDELTA_OK on every rank when no rank failed. */
camdelta_status cd_mpi_agree(MPI_Comm comm, int rank, int P, camdelta_status st);
#endif
