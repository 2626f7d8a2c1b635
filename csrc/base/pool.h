/* pool.h - a small fixed-size pthread pool for independent jobs.
 *
 * Shape of zstd's POOL: a bounded queue of (batch, job index) items, one
 * mutex, two condition variables, workers joined on free.  A caller hands a
 * batch of n jobs to hpgo_pool_run, which blocks until every job of that
 * batch has run; each job writes only its own result slot and the caller
 * reduces the slots in index order afterwards, so results do not depend on
 * the number of threads.  Several threads may call hpgo_pool_run on the same
 * pool at once; their batches share the workers. */
#ifndef HPGO_POOL_H
#define HPGO_POOL_H

#include <stdint.h>

#include "err.h"

#define HPGO_POOL_MAX_THREADS 256

typedef struct hpgo_pool hpgo_pool_t;

/* A job: ctx is the caller's context, job the index in [0, n_jobs). */
typedef void (*hpgo_pool_fn)(void *ctx, int64_t job);

/* Number of threads a pool of size 0 gets: the environment variable
 * HPGO_NUM_THREADS when it holds a positive integer, otherwise the number of
 * online processors; clamped to [1, HPGO_POOL_MAX_THREADS].  Thread-safe. */
int32_t hpgo_default_threads(void);

/* Start a pool of nthreads worker threads (0 = hpgo_default_threads(),
 * larger values are clamped to HPGO_POOL_MAX_THREADS).  When the system
 * refuses a thread after the first one started, the pool keeps the workers
 * it has (hpgo_pool_size tells; results never depend on the count).
 * HPGO_E_INVALID for a negative count, HPGO_E_NOMEM / HPGO_E_INTERNAL when
 * memory or not even one thread can be had.  The caller owns *out and frees
 * it with hpgo_pool_free. */
int hpgo_pool_new(int32_t nthreads, hpgo_pool_t **out, hpgo_err_t *err);

/* Threads of the pool. */
int32_t hpgo_pool_size(const hpgo_pool_t *pool);

/* Run fn(ctx, j) for j = 0 .. n_jobs-1 on the workers and return when all
 * have finished.  Jobs may run in any order and concurrently; fn must not
 * call hpgo_pool_run on the same pool.  n_jobs <= 0 returns at once.
 * Thread-safe: several callers may share one pool. */
void hpgo_pool_run(hpgo_pool_t *pool, int64_t n_jobs, hpgo_pool_fn fn, void *ctx);

/* Stop the workers after the queue drains and join them; NULL is a no-op.
 * No hpgo_pool_run may be in progress. */
void hpgo_pool_free(hpgo_pool_t *pool);

/* Convenience for one-off parallel loops: run n_jobs jobs on a temporary
 * pool of min(nthreads, n_jobs) workers (0 = default); with one worker or
 * one job, or when no thread can be started, they run on the calling
 * thread.  HPGO_OK, or HPGO_E_NOMEM (nothing has run then). */
int hpgo_pool_map(int32_t nthreads, int64_t n_jobs, hpgo_pool_fn fn, void *ctx,
                  hpgo_err_t *err);

#endif
