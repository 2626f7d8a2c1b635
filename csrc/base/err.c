/* err.c - filling hpgo_err_t records.
 *
 * DESIGN: a message is formatted with vsnprintf into the caller's buffer, so
 * the function is re-entrant and allocation-free (it must work when memory
 * has run out).  Truncation of very long messages is accepted silently. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>

int hpgo_err_set(hpgo_err_t *err, int code, long line, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        err->line = line;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void hpgo_err_clear(hpgo_err_t *err)
{
    if (err) {
        err->code = HPGO_OK;
        err->line = 0;
        err->msg[0] = '\0';
    }
}

const char *hpgo_strerror(int code)
{
    switch (code) {
    case HPGO_OK: return "HPGO_OK";
    case HPGO_E_NOMEM: return "HPGO_E_NOMEM";
    case HPGO_E_NOTFOUND: return "HPGO_E_NOTFOUND";
    case HPGO_E_IO: return "HPGO_E_IO";
    case HPGO_E_PARSE: return "HPGO_E_PARSE";
    case HPGO_E_INVALID: return "HPGO_E_INVALID";
    case HPGO_E_LIMIT: return "HPGO_E_LIMIT";
    case HPGO_E_NOPLAN: return "HPGO_E_NOPLAN";
    case HPGO_E_INTERNAL: return "HPGO_E_INTERNAL";
    case HPGO_E_CANCELLED: return "HPGO_E_CANCELLED";
    default: return "HPGO_E_UNKNOWN";
    }
}
