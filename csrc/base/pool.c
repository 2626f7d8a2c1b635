/* pool.c - fixed-size pthread pool (see pool.h).
 *
 * DESIGN: a ring buffer of (batch, index) items of capacity 4 x threads,
 * guarded by one mutex.  `work` wakes workers when an item arrives or the
 * pool shuts down; `space` wakes producers when an item leaves the queue and
 * the waiting caller when a job of its batch completes (both wait for "the
 * queue changed").  A batch lives on its caller's stack; its `done` counter
 * is protected by the pool mutex.  Workers never touch a batch after the
 * increment that lets its caller return.  Cost per job: one lock round trip
 * on each side, which is negligible for the millisecond-scale simulations it
 * runs. */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct pool_batch {
    hpgo_pool_fn fn;
    void *ctx;
    int64_t n;
    int64_t done;
} pool_batch;

typedef struct pool_item {
    pool_batch *batch;
    int64_t job;
} pool_item;

struct hpgo_pool {
    pthread_mutex_t mu;
    pthread_cond_t work;
    pthread_cond_t space;
    pool_item *queue;
    int32_t cap, head, count;
    int shutdown;
    int32_t n_threads;
    pthread_t *threads;
};

int32_t hpgo_default_threads(void)
{
    const char *env = getenv("HPGO_NUM_THREADS");
    if (env && *env) {
        char *end = NULL;
        long v = strtol(env, &end, 10);
        if (end && *end == '\0' && v > 0)
            return v > HPGO_POOL_MAX_THREADS ? HPGO_POOL_MAX_THREADS : (int32_t)v;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > HPGO_POOL_MAX_THREADS ? HPGO_POOL_MAX_THREADS : (int32_t)n;
}

static void *pool_worker(void *arg)
{
    hpgo_pool_t *p = (hpgo_pool_t *)arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->count == 0 && !p->shutdown)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->count == 0) /* shutdown with an empty queue */
            break;
        pool_item it = p->queue[p->head];
        p->head = (p->head + 1) % p->cap;
        p->count--;
        pthread_cond_broadcast(&p->space);
        pthread_mutex_unlock(&p->mu);
        it.batch->fn(it.batch->ctx, it.job);
        pthread_mutex_lock(&p->mu);
        if (++it.batch->done == it.batch->n)
            pthread_cond_broadcast(&p->space);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int hpgo_pool_new(int32_t nthreads, hpgo_pool_t **out, hpgo_err_t *err)
{
    *out = NULL;
    if (nthreads < 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "threads must be >= 0 (0 = all cores), got %d", (int)nthreads);
    if (nthreads == 0)
        nthreads = hpgo_default_threads();
    if (nthreads > HPGO_POOL_MAX_THREADS)
        nthreads = HPGO_POOL_MAX_THREADS;
    hpgo_pool_t *p = calloc(1, sizeof *p);
    if (!p)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory creating a thread pool");
    int have_mu = 0, have_work = 0, have_space = 0, rc;
    p->cap = 4 * nthreads;
    p->queue = malloc((size_t)p->cap * sizeof *p->queue);
    p->threads = calloc((size_t)nthreads, sizeof *p->threads);
    if (!p->queue || !p->threads) {
        rc = hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory creating a thread pool");
        goto error;
    }
    have_mu = pthread_mutex_init(&p->mu, NULL) == 0;
    have_work = have_mu && pthread_cond_init(&p->work, NULL) == 0;
    have_space = have_work && pthread_cond_init(&p->space, NULL) == 0;
    if (!have_space) {
        rc = hpgo_err_set(err, HPGO_E_INTERNAL, 0, "cannot create the pool's mutex / conditions");
        goto error;
    }
    for (int32_t i = 0; i < nthreads; i++) {
        if (pthread_create(&p->threads[i], NULL, pool_worker, p) != 0) {
            if (i > 0) { /* out of threads or address space: fewer workers, same results */
                nthreads = i;
                break;
            }
            p->n_threads = 0;
            hpgo_pool_free(p);
            return hpgo_err_set(err, HPGO_E_INTERNAL, 0, "cannot start a thread for the pool");
        }
    }
    p->n_threads = nthreads;
    *out = p;
    return HPGO_OK;
error:
    if (have_work)
        pthread_cond_destroy(&p->work);
    if (have_mu)
        pthread_mutex_destroy(&p->mu);
    free(p->queue);
    free(p->threads);
    free(p);
    return rc;
}

int32_t hpgo_pool_size(const hpgo_pool_t *pool)
{
    return pool ? pool->n_threads : 0;
}

void hpgo_pool_run(hpgo_pool_t *p, int64_t n_jobs, hpgo_pool_fn fn, void *ctx)
{
    if (n_jobs <= 0)
        return;
    pool_batch b = {fn, ctx, n_jobs, 0};
    pthread_mutex_lock(&p->mu);
    for (int64_t j = 0; j < n_jobs; j++) {
        while (p->count == p->cap)
            pthread_cond_wait(&p->space, &p->mu);
        p->queue[(p->head + p->count) % p->cap] = (pool_item){&b, j};
        p->count++;
        pthread_cond_signal(&p->work);
    }
    while (b.done < b.n)
        pthread_cond_wait(&p->space, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void hpgo_pool_free(hpgo_pool_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->shutdown = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->space);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    free(p->queue);
    free(p->threads);
    free(p);
}

int hpgo_pool_map(int32_t nthreads, int64_t n_jobs, hpgo_pool_fn fn, void *ctx, hpgo_err_t *err)
{
    if (nthreads <= 0)
        nthreads = hpgo_default_threads();
    if (nthreads > n_jobs)
        nthreads = (int32_t)(n_jobs > 0 ? n_jobs : 1);
    if (nthreads <= 1) {
        for (int64_t j = 0; j < n_jobs; j++)
            fn(ctx, j);
        return HPGO_OK;
    }
    hpgo_pool_t *p = NULL;
    int rc = hpgo_pool_new(nthreads, &p, err);
    if (rc == HPGO_E_INTERNAL) { /* no thread at all: the calling thread does the work */
        hpgo_err_clear(err);
        for (int64_t j = 0; j < n_jobs; j++)
            fn(ctx, j);
        return HPGO_OK;
    }
    if (rc != HPGO_OK)
        return rc;
    hpgo_pool_run(p, n_jobs, fn, ctx);
    hpgo_pool_free(p);
    return HPGO_OK;
}
