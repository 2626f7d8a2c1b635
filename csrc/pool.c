/* pool.c - fixed-size pthread pool.
 *
 * DESIGN: workers wait on `work` for queued jobs; hpgo_pool_run enqueues the
 * job indices of one batch into a bounded ring (blocking on `room` while it
 * is full) and then waits on `room` until the batch's pending count is zero.
 * One mutex guards the ring and the counters.  hpgo_pool_free sets `stop`,
 * wakes everyone and joins.  The pool itself holds no global state; every
 * call that needs threads may create its own pool. */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "err.h"

#define QUEUE_CAP 256

typedef struct qitem {
    hpgo_job_fn fn;
    void *ctx;
    int64_t job;
} qitem_t;

struct hpgo_pool {
    pthread_mutex_t mu;
    pthread_cond_t work; /* signalled when a job is queued or on stop */
    pthread_cond_t room; /* signalled when a slot frees or a job finishes */
    qitem_t q[QUEUE_CAP];
    int head, count;
    int64_t pending;     /* jobs of the current batch not finished yet */
    int stop;
    int nthreads;
    pthread_t *threads;
};

int hpgo_default_threads(void)
{
    const char *s = getenv("HPGO_NUM_THREADS");
    if (s && *s) {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (end && *end == '\0' && v > 0 && v <= 4096)
            return (int)v;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void *worker(void *arg)
{
    hpgo_pool_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->count && !p->stop)
            pthread_cond_wait(&p->work, &p->mu);
        if (!p->count && p->stop)
            break;
        qitem_t it = p->q[p->head];
        p->head = (p->head + 1) % QUEUE_CAP;
        p->count--;
        pthread_cond_broadcast(&p->room);
        pthread_mutex_unlock(&p->mu);
        it.fn(it.ctx, it.job);
        pthread_mutex_lock(&p->mu);
        p->pending--;
        if (p->pending == 0)
            pthread_cond_broadcast(&p->room);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

hpgo_pool_t *hpgo_pool_new(int nthreads)
{
    if (nthreads <= 0)
        nthreads = hpgo_default_threads();
    hpgo_pool_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->threads = calloc((size_t)nthreads, sizeof(pthread_t));
    if (!p->threads) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->room, NULL);
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
            p->nthreads = i;
            hpgo_pool_free(p);
            return NULL;
        }
        p->nthreads = i + 1;
    }
    return p;
}

int hpgo_pool_run(hpgo_pool_t *p, int64_t n_jobs, hpgo_job_fn fn, void *ctx)
{
    pthread_mutex_lock(&p->mu);
    p->pending += n_jobs;
    for (int64_t j = 0; j < n_jobs; j++) {
        while (p->count == QUEUE_CAP)
            pthread_cond_wait(&p->room, &p->mu);
        p->q[(p->head + p->count) % QUEUE_CAP] = (qitem_t){fn, ctx, j};
        p->count++;
        pthread_cond_signal(&p->work);
    }
    while (p->pending > 0)
        pthread_cond_wait(&p->room, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return HPGO_OK;
}

void hpgo_pool_free(hpgo_pool_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->room);
    free(p->threads);
    free(p);
}

int hpgo_pool_map(int nthreads, int64_t n_jobs, hpgo_job_fn fn, void *ctx)
{
    if (nthreads <= 0)
        nthreads = hpgo_default_threads();
    if (nthreads > n_jobs)
        nthreads = (int)n_jobs;
    if (nthreads <= 1) {
        for (int64_t j = 0; j < n_jobs; j++)
            fn(ctx, j);
        return HPGO_OK;
    }
    hpgo_pool_t *p = hpgo_pool_new(nthreads);
    if (!p)
        return HPGO_E_NOMEM;
    hpgo_pool_run(p, n_jobs, fn, ctx);
    hpgo_pool_free(p);
    return HPGO_OK;
}
