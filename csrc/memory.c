/* memory.c - per-GPU memory breakdown and verdict (see memory.h).
 *
 * DESIGN: model states are bytes per parameter by precision
 * (hpgo_work_state_bytes) divided by dp where ZeRO shards them (routed
 * experts' by the expert data-parallel size); ZeRO-3
 * additionally holds the gathered 16-bit weights of the layer being
 * computed and of the next one (prefetch), counted in `other`.  The
 * verdict compares the sum with the GPU's memory; no hidden margin. */
#include "memory.h"

#include "work.h"

void hpgo_memory_breakdown(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int32_t precision,
                           double params, double expert_params, double max_layer_params,
                           double activations, double other, hpgo_mem_t *out)
{
    double wb, gb, ob;
    hpgo_work_state_bytes(precision, p->fp8_params, &wb, &gb, &ob);
    double d = (double)p->dp * p->cp; /* ZeRO shards over every replica of the sequence */
    int64_t edp = hpgo_parplan_edp(p);
    double de = edp > 0 ? (double)edp : 1; /* ... and an expert's over its replicas */
    double dense = params - expert_params, ex = expert_params;
    out->weights = dense * wb / (p->zero >= 3 ? d : 1) + ex * wb / (p->zero >= 3 ? de : 1);
    out->gradients = dense * gb / (p->zero >= 2 ? d : 1) + ex * gb / (p->zero >= 2 ? de : 1);
    out->optimizer = dense * ob / (p->zero >= 1 ? d : 1) + ex * ob / (p->zero >= 1 ? de : 1);
    out->activations = activations;
    out->other = other + (p->zero >= 3 && d > 1 ? 2 * max_layer_params * wb : 0);
    out->total = out->weights + out->gradients + out->optimizer + out->activations + out->other;
    out->capacity = c->gpu.hbm_bytes;
    out->margin = out->capacity - out->total;
    out->fits = out->total <= out->capacity;
}
