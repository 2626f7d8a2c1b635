/* call_glue.c - run a long core call so that Ctrl-C and a timeout stop it.
 *
 * DESIGN: Python's SIGINT handler only sets a flag; the KeyboardInterrupt is
 * raised when a thread holding the GIL calls PyErr_CheckSignals (on the main
 * thread).  A core call running with the GIL released on the calling thread
 * cannot do that, so glue_call runs the core work on a helper pthread while
 * the calling thread waits on a condition variable with the GIL released,
 * waking every GLUE_POLL_MS to take the GIL and call PyErr_CheckSignals (a
 * no-op off the main thread) and to compare the clock with the deadline.
 * On a signal's exception or a passed deadline it raises the call's cancel
 * flag (cancel.h), waits for the core to notice it (its loops read the flag
 * every few thousand iterations and free what they built), joins the helper
 * and returns -1 with the exception set: KeyboardInterrupt (or whatever the
 * signal handler raised), or TimeoutError naming the call and the timeout.
 * The helper touches no Python object.  When no thread can be started the
 * work runs on the calling thread with the GIL released, as before (not
 * interruptible).  Small calls without a timeout skip the helper: starting
 * a thread costs tens of microseconds.  A helper that only waits for a pool
 * the caller made gets a 64 KiB stack instead of the default 8 MiB: under a
 * tight address-space limit the pool's workers take what is left, and a
 * full-size helper stack would take the memory their results need. */
#include "glue.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#define GLUE_POLL_MS 50
#define GLUE_WAITER_STACK ((size_t)64 << 10)

typedef struct call {
    glue_work_fn fn;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} call_t;

static void *call_main(void *arg)
{
    call_t *c = arg;
    c->fn(c->ctx);
    pthread_mutex_lock(&c->mu);
    c->done = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Wait until the work is done or `until` (CLOCK_MONOTONIC seconds) passes;
 * returns done.  Called without the GIL. */
static int wait_until(call_t *c, double until)
{
    struct timespec ts;
    ts.tv_sec = (time_t)until;
    ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    while (!c->done && pthread_cond_timedwait(&c->cv, &c->mu, &ts) != ETIMEDOUT)
        ;
    int done = c->done;
    pthread_mutex_unlock(&c->mu);
    return done;
}

static void wait_done(call_t *c)
{
    pthread_mutex_lock(&c->mu);
    while (!c->done)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

int glue_call(glue_work_fn fn, void *ctx, hpgo_cancel_t *cancel, double timeout, int flags,
              const char *what)
{
    int has_deadline = timeout > 0.0 && isfinite(timeout);
    if ((flags & GLUE_SMALL) && !has_deadline) {
        Py_BEGIN_ALLOW_THREADS
        fn(ctx);
        Py_END_ALLOW_THREADS
        return 0;
    }
    call_t c;
    c.fn = fn;
    c.ctx = ctx;
    c.done = 0;
    pthread_condattr_t ca;
    int ok = pthread_condattr_init(&ca) == 0;
    if (ok && (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
               pthread_cond_init(&c.cv, &ca) != 0))
        ok = 0;
    if (ok && pthread_mutex_init(&c.mu, NULL) != 0) {
        pthread_cond_destroy(&c.cv);
        ok = 0;
    }
    pthread_t th;
    pthread_attr_t ta, *tap = NULL;
    if ((flags & GLUE_WAITS) && pthread_attr_init(&ta) == 0) {
        tap = &ta;
        if (pthread_attr_setstacksize(&ta, GLUE_WAITER_STACK) != 0) {
            pthread_attr_destroy(&ta);
            tap = NULL;
        }
    }
    if (ok && pthread_create(&th, tap, call_main, &c) != 0) {
        pthread_mutex_destroy(&c.mu);
        pthread_cond_destroy(&c.cv);
        ok = 0;
    }
    if (tap)
        pthread_attr_destroy(tap);
    pthread_condattr_destroy(&ca);
    if (!ok) {
        Py_BEGIN_ALLOW_THREADS
        fn(ctx);
        Py_END_ALLOW_THREADS
        return 0;
    }
    double deadline = has_deadline ? now_s() + timeout : 0.0;
    int stop = 0, timed_out = 0, done = 0;
    while (!done) {
        Py_BEGIN_ALLOW_THREADS
        double until = now_s() + GLUE_POLL_MS * 1e-3;
        if (has_deadline && deadline < until)
            until = deadline;
        done = wait_until(&c, until);
        Py_END_ALLOW_THREADS
        if (done)
            break;
        if (PyErr_CheckSignals() < 0) {
            stop = 1;
            break;
        }
        if (has_deadline && now_s() >= deadline) {
            stop = timed_out = 1;
            break;
        }
    }
    if (stop) {
        hpgo_cancel_request(cancel);
        Py_BEGIN_ALLOW_THREADS
        wait_done(&c);
        Py_END_ALLOW_THREADS
    }
    pthread_join(th, NULL);
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
    if (timed_out) {
        char secs[40];
        snprintf(secs, sizeof secs, "%.6g", timeout);
        PyErr_Format(PyExc_TimeoutError,
                     "%s did not finish within its timeout of %s s; it was stopped and "
                     "nothing was kept (give a larger timeout=, or None for no limit)",
                     what, secs);
        return -1;
    }
    return stop ? -1 : 0;
}

int glue_timeout(PyObject *o, double *out)
{
    *out = 0.0;
    if (o == NULL || o == Py_None)
        return 0;
    double v;
    if (glue_double(o, "timeout (seconds or None)", &v) < 0)
        return -1;
    if (!(v > 0.0)) {
        PyErr_Format(PyExc_ValueError, "timeout must be > 0 seconds (or None), got %R", o);
        return -1;
    }
    *out = v; /* +inf: no limit */
    return 0;
}
