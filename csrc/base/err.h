/* err.h - error codes and the caller-owned error record of the hpgo C core.
 *
 * DESIGN: every fallible core function returns an int (HPGO_OK or a negative
 * HPGO_E_* code) and, when the caller passes a non-NULL hpgo_err_t, fills it
 * with a human-readable message (and the 1-based line of the offending input
 * for parse errors).  The core never prints, exits or aborts; the CPython
 * glue turns codes into exceptions in one place (module/errors.c). */
#ifndef HPGO_ERR_H
#define HPGO_ERR_H

#include <stddef.h>

enum {
    HPGO_OK = 0,
    HPGO_E_NOMEM = -1,    /* allocation failed                        -> MemoryError */
    HPGO_E_NOTFOUND = -2, /* a file does not exist                    -> FileNotFoundError */
    HPGO_E_IO = -3,       /* any other OS error while reading a file  -> OSError */
    HPGO_E_PARSE = -4,    /* malformed input file (line is set)       -> ValueError */
    HPGO_E_INVALID = -5,  /* invalid argument                         -> ValueError */
    HPGO_E_LIMIT = -6,    /* input beyond a documented limit          -> ValueError */
    HPGO_E_NOPLAN = -7,   /* the planner cannot produce a result      -> hpgo.PlanningError */
    HPGO_E_INTERNAL = -8, /* broken invariant (a bug)                 -> hpgo.HpgoError */
    HPGO_E_CANCELLED = -9 /* the caller raised its cancel flag (cancel.h) -> KeyboardInterrupt
                             or TimeoutError, whichever made the glue raise it */
};

#define HPGO_ERRMSG_LEN 640

typedef struct hpgo_err {
    int code;                  /* same value the function returned */
    long line;                 /* 1-based input line for HPGO_E_PARSE, else 0 */
    char msg[HPGO_ERRMSG_LEN]; /* NUL-terminated message, no trailing newline */
} hpgo_err_t;

/* Fill *err (if non-NULL) and return code.  printf-style; thread-safe. */
int hpgo_err_set(hpgo_err_t *err, int code, long line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Reset *err (if non-NULL) to HPGO_OK with an empty message. */
void hpgo_err_clear(hpgo_err_t *err);

/* Static name of a code ("HPGO_E_PARSE", ...). */
const char *hpgo_strerror(int code);

#endif
