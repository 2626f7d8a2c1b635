/* grow.h - the growable arrays of the searches: double a caller-owned
 * array's capacity until it holds `need` elements.
 *
 * hpgo_grow(&p, &cap, need, elem, first): 0 when *p holds at least need
 * elements of `elem` bytes (growing it from `first`, then by doubling),
 * -1 when the allocation fails (then *p and *cap are unchanged).  Not
 * thread-safe on one array. */
#ifndef HPGO_GROW_H
#define HPGO_GROW_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static inline int hpgo_grow(void **p, int64_t *cap, int64_t need, size_t elem, int64_t first)
{
    if (need <= *cap)
        return 0;
    int64_t nc = *cap ? *cap * 2 : first;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = nc;
    return 0;
}

#endif
