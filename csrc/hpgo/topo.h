/* topo.h - HPGO devices: GPUs grouped into machines by cumulative
 * boundaries ("seps"), fixed bandwidths, and the GPU allocation strategies
 * FreshFirst / AppendFirst / ScatterFirst (spec/hpgo-compat.md section 5).
 *
 * GPU sets are bitsets of HPGO_MAX_GPUS bits (hpgo_gpuset_t).  A topology
 * is immutable after hpgo_topo_new and may be shared between threads. */
#ifndef HPGO_TOPO_H
#define HPGO_TOPO_H

#include <stdint.h>

#include "cluster.h" /* HPGO's bandwidths: the dapple-v100 preset's (HPGO_NVLINK_BW, ...) */
#include "err.h"

#define HPGO_MAX_GPUS 1024
#define HPGO_GPUSET_WORDS (HPGO_MAX_GPUS / 64)

typedef struct hpgo_gpuset {
    uint64_t w[HPGO_GPUSET_WORDS];
} hpgo_gpuset_t;

typedef struct hpgo_topo {
    int32_t n;          /* number of GPUs */
    int32_t machines;   /* number of machines */
    int32_t *seps;      /* cumulative boundaries, machines entries, seps[machines-1] == n */
    int32_t *machine_of; /* n entries: machine index of each GPU */
} hpgo_topo_t;

/* HPGO_E_INVALID for n < 1, n > HPGO_MAX_GPUS, empty seps, seps not strictly
 * increasing from > 0, or seps[last] != n. */
int hpgo_topo_new(int32_t n, const int32_t *seps, int32_t n_seps, hpgo_topo_t **out,
                  hpgo_err_t *err);
void hpgo_topo_free(hpgo_topo_t *t);

static inline void hpgo_gpuset_add(hpgo_gpuset_t *s, int32_t g)
{
    s->w[g >> 6] |= (uint64_t)1 << (g & 63);
}
static inline int hpgo_gpuset_has(const hpgo_gpuset_t *s, int32_t g)
{
    return (int)((s->w[g >> 6] >> (g & 63)) & 1u);
}
int32_t hpgo_gpuset_count(const hpgo_gpuset_t *s);
int32_t hpgo_gpuset_min(const hpgo_gpuset_t *s); /* -1 if empty */
int32_t hpgo_gpuset_max(const hpgo_gpuset_t *s); /* -1 if empty */

/* Communication costs of section 5, seconds; bytes as double. */
int hpgo_topo_cross_within(const hpgo_topo_t *t, const hpgo_gpuset_t *s);
double hpgo_topo_all_reduce_time(const hpgo_topo_t *t, const hpgo_gpuset_t *s, double bytes);
double hpgo_topo_split_concat_time(const hpgo_topo_t *t, const hpgo_gpuset_t *from,
                                   const hpgo_gpuset_t *to, double bytes);

#endif
