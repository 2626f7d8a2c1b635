/* pool.h - a small fixed-size pthread pool (the shape of zstd's POOL): a
 * bounded job queue, one mutex, two condition variables, join on free.
 *
 * Jobs are (fn, ctx, index) triples; each job must write only its own result
 * slot, and the caller reduces the slots in index order afterwards, so
 * results never depend on the thread count. */
#ifndef HPGO_POOL_H
#define HPGO_POOL_H

#include <stdint.h>

typedef void (*hpgo_job_fn)(void *ctx, int64_t job);
typedef struct hpgo_pool hpgo_pool_t;

/* Threads to use for nthreads = 0: the HPGO_NUM_THREADS environment
 * variable if it holds a positive integer, else the number of online cores.
 * Always >= 1. */
int hpgo_default_threads(void);

/* Create a pool of nthreads workers (0 = hpgo_default_threads()).  Returns
 * NULL when threads or memory cannot be had. */
hpgo_pool_t *hpgo_pool_new(int nthreads);

/* Run fn(ctx, j) for j = 0..n_jobs-1 on the pool and wait for all of them.
 * Returns 0 (HPGO_OK).  Not to be called concurrently on one pool. */
int hpgo_pool_run(hpgo_pool_t *pool, int64_t n_jobs, hpgo_job_fn fn, void *ctx);

/* Join the workers and free the pool; NULL is a no-op. */
void hpgo_pool_free(hpgo_pool_t *pool);

/* Convenience: run n_jobs jobs with min(nthreads, n_jobs) workers of a
 * temporary pool; with one worker (or one job) they run on the calling
 * thread.  Returns HPGO_OK or HPGO_E_NOMEM when no pool could be created. */
int hpgo_pool_map(int nthreads, int64_t n_jobs, hpgo_job_fn fn, void *ctx);

#endif
