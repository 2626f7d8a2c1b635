/* memory.h - the one memory model: what a GPU holds during a training step
 * and whether it fits.
 *
 * Per GPU: weights, gradients and optimizer state of its parameters by
 * precision and ZeRO stage (spec/training-model.md 3.1: bf16 with fp32
 * main gradients and Adam = 2 + 4 + 12 bytes per parameter; ZeRO-1 / the
 * distributed optimizer shards the optimizer state over dp, ZeRO-2 the
 * gradients too, ZeRO-3 the weights too), the activations at their peak
 * (from the schedule: the simulator tracks what each op stores and frees),
 * and other bytes (CUDA context and communication buffers, the weights a
 * ZeRO-3 step gathers and the gradient buffers in flight), plus the
 * caching allocator's reserve.  Thread-safe, no state. */
#ifndef HPGO_MEMORY_H
#define HPGO_MEMORY_H

#include <stdint.h>

#include "cluster.h"
#include "parplan.h"

/* CUDA context (about 0.3-0.7 GB, pytorch #86509) and NCCL buffers (about
 * 1-2 GB per process in the reports of spec 3.7): the default of `other`. */
#define HPGO_MEM_DEFAULT_OVERHEAD 2e9

typedef struct hpgo_mem {
    double weights, gradients, optimizer, activations, other;
    double total;    /* bytes, reserved included */
    double capacity; /* the GPU's memory, bytes */
    double margin;   /* capacity - total (negative: does not fit) */
    int fits;        /* total <= capacity */
    double reserved; /* the caching allocator's reserve beyond the allocated bytes */
    double host;     /* bytes offloaded to the host by this GPU (optimizer, activations) */
} hpgo_mem_t;

/* Breakdown of a GPU holding `params` parameters (tp-sharded), of which
 * `expert_params` in routed experts (their ZeRO shards are over the expert
 * data-parallel group, the rest over the plan's shard group,
 * hpgo_parplan_shard), whose activations peak at `activations` bytes, plus
 * `other` bytes; ZeRO-3 gathers `max_layer_params` at a time (memory.c
 * lists the buffers), and the caching allocator reserves
 * c->sys.alloc_frag of what it holds beyond the allocated bytes.  With
 * offload_activations, that share of `activations` beyond the one
 * micro-batch being computed (`act_one` bytes) is on the host. */
void hpgo_memory_breakdown(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int32_t precision,
                           double params, double expert_params, double max_layer_params,
                           double activations, double other, hpgo_mem_t *out);

/* The same with the activations of one micro-batch given apart (what an
 * activation-offloading plan cannot move: the micro-batch being computed). */
void hpgo_memory_breakdown2(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int32_t precision,
                            double params, double expert_params, double max_layer_params,
                            double activations, double act_one, double other, hpgo_mem_t *out);

/* The same with the parameters whose gradients a pipelined FSDP stage
 * accumulates unsharded at once (`accum_params`, >= 0; negative: every
 * dense parameter of the device, as hpgo_memory_breakdown2 counts them). */
void hpgo_memory_breakdown3(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int32_t precision,
                            double params, double expert_params, double max_layer_params,
                            double activations, double act_one, double other,
                            double accum_params, hpgo_mem_t *out);
/* The reserve share a plan's memory is priced with: the cluster's
 * alloc_frag, and at least the one measured for torchtitan's block under
 * its kernel sets (compile-blocks, eager-unfused-norm; cluster.h). */
double hpgo_alloc_frag(const hpgo_cluster_t *c, int32_t kernels);
/* The same at a moment when the step holds no gradients (grads_held 0:
 * gradients 0), or holds them (1: hpgo_memory_breakdown3). */
void hpgo_memory_breakdown4(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int32_t precision,
                            double params, double expert_params, double max_layer_params,
                            double activations, double act_one, double other,
                            double accum_params, int grads_held, hpgo_mem_t *out);

#endif
