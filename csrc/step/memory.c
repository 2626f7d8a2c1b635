/* memory.c - per-GPU memory breakdown and verdict (see memory.h).
 *
 * DESIGN: model states are bytes per parameter by precision
 * (hpgo_work_state_bytes) divided by the shard group where ZeRO shards them
 * (hpgo_parplan_shard: dp x cp, or the hybrid group of shard_size; routed
 * experts' by the expert data-parallel size).  On top, what the frameworks
 * allocate while they run (spec/stack-mechanisms.md 3.1-3.4), in `other`:
 *  - ZeRO-3 / FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py,
 *    _fsdp_collectives.py): the gathered 16-bit weights of the layer being
 *    computed and of the prefetched next one, plus the all-gather output
 *    buffer the next one is copied out of (3 layers); without resharding
 *    after forward every layer of the device stays gathered from its forward
 *    to its backward (+ the buffer); in the backward the layer's unsharded
 *    16-bit gradient and two reduce-scatter inputs in the reduce dtype in
 *    flight (the current and the previous layer's); under pipeline
 *    parallelism with several micro-batches the gradients accumulate
 *    unsharded in the reduce dtype until the stage's last backward
 *    (torch/distributed/pipelining/stage.py, perform_reduce_grad; Llama 3
 *    section 3.3.2: fp32 accumulation across micro-batches); FSDP2 allocates
 *    that buffer at a stage's first backward and frees it at the stage's
 *    reduce-scatter, so the caller may give the parameters accumulated at
 *    once (hpgo_memory_breakdown3: one chunk at a time where the schedule
 *    runs the chunks' backwards one after the other).
 *  - ZeRO-2 (DeepSpeed stage_1_and_2.py): the contiguous 16-bit gradient
 *    bucket of reduce_bucket_size = 5e8 elements (zero/config.py), two with
 *    overlap_comm ("double buffers"), never more than the gradients.
 *  - The caching allocator (c10/cuda/CUDACachingAllocator.cpp): reserved >=
 *    allocated; the cached blocks it cannot reuse are alloc_frag of the
 *    reserved memory (GMLake, ASPLOS'24: 9.2 GB of 80 GB on average), so
 *    reserved = allocated / (1 - alloc_frag).  The CUDA context and NCCL's
 *    buffers (`other` as passed in) are not the allocator's.
 * PyTorch FSDP2 as torchtitan runs it (zero 3 with the torch.compile kernel
 * sets): fully_shard with MixedPrecisionPolicy(param_dtype bf16,
 * reduce_dtype fp32) over fp32 parameters (torchtitan's apply_fsdp,
 * mixed_precision_reduce default "float32") keeps the fp32 parameter as
 * the only sharded copy (4 B), its sharded fp32 gradient (4 B) and AdamW's
 * two fp32 moments (8 B): 16 B a parameter where a distributed optimizer
 * holds a 16-bit weight beside an fp32 master (18 B); the 16-bit weights
 * exist only gathered (2 B each, also in fp8: torchao's float8 linears
 * keep no fp8 copy; under fp8_all_gather FSDP2 gathers them in fp8, 1 B).
 * Offloaded optimizer states (ZeRO-Offload) and activations are counted in
 * `host`, not in the GPU's total; the plan fits only if a node's GPUs'
 * `host` bytes fit its CPU memory.  The verdict compares the total with the
 * GPU's memory; no hidden margin. */
#include "memory.h"

#include "work.h"

/* DeepSpeed ZeRO-1/2 reduce_bucket_size default (zero/config.py), elements */
#define DS_REDUCE_BUCKET 5e8

double hpgo_alloc_frag(const hpgo_cluster_t *c, int32_t kernels)
{
    double f = c->sys.alloc_frag;
    if ((kernels == HPGO_KS_COMPILE_BLOCKS || kernels == HPGO_KS_EAGER_UNFUSED_NORM) &&
        f < HPGO_ALLOC_FRAG_TITAN)
        f = HPGO_ALLOC_FRAG_TITAN;
    return f;
}

void hpgo_memory_breakdown3(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int32_t precision,
                            double params, double expert_params, double max_layer_params,
                            double activations, double act_one, double other,
                            double accum_params, hpgo_mem_t *out)
{
    hpgo_memory_breakdown4(c, p, precision, params, expert_params, max_layer_params, activations,
                           act_one, other, accum_params, 1, out);
}

void hpgo_memory_breakdown4(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int32_t precision,
                            double params, double expert_params, double max_layer_params,
                            double activations, double act_one, double other,
                            double accum_params, int grads_held, hpgo_mem_t *out)
{
    double wb, gb, ob;
    hpgo_work_state_bytes(precision, p->fp8_params, p->optimizer_impl, &wb, &gb, &ob);
    /* torchao's Float8Linear (fp8 under a PyTorch kernel set) keeps no fp8
     * copy of a weight: it casts the 16-bit one at each use (transient,
     * priced in the layer's work); Transformer Engine keeps the fp8 weight
     * and its transpose (profiles/h100-sxm5-float8-steps.json: every
     * torchao recipe's block peaked at the bf16 block's allocation) */
    if (precision == HPGO_PREC_FP8 && p->kernels != HPGO_KS_TE && !p->fp8_params)
        wb = 2;
    double wgather = wb; /* bytes of a gathered (unsharded) weight */
    /* FSDP2's mixed precision (a PyTorch kernel set, compiled or eager, below fp32) */
    int fsdp2_mp = p->kernels != HPGO_KS_TE && precision != HPGO_PREC_FP32;
    if (p->zero >= 3 && fsdp2_mp) {
        wb = 4, gb = 4, ob = 8; /* FSDP2: the fp32 parameter is the master */
        wgather = 2;
    }
    /* torchao's float8 all-gather: FSDP2's all-gather buffers and unsharded
     * weights hold fp8 (1 B) -- taken for every gathered parameter, though
     * the norms, the embedding and the output layer stay 16-bit (under
     * 0.1 % of a Llama block; without resharding the embedding's and the
     * output layer's second byte is not counted) */
    double gunsharded = wgather; /* the layer's unsharded 16-bit gradient */
    if (p->fp8_all_gather)
        wgather = 1;
    double d = (double)hpgo_parplan_shard(p); /* ZeRO shards over its group of replicas */
    int64_t edp = hpgo_parplan_edp(p);
    double de = edp > 0 ? (double)edp : 1; /* ... and an expert's over its replicas */
    double dense = params - expert_params, ex = expert_params;
    out->weights = dense * wb / (p->zero >= 3 ? d : 1) + ex * wb / (p->zero >= 3 ? de : 1);
    out->gradients = grads_held ? dense * gb / (p->zero >= 2 ? d : 1) +
                                      ex * gb / (p->zero >= 2 ? de : 1)
                                : 0;
    out->optimizer = dense * ob / (p->zero >= 1 ? d : 1) + ex * ob / (p->zero >= 1 ? de : 1);
    out->host = 0;
    if (p->offload_optimizer) {
        out->host = out->optimizer;
        out->optimizer = 0;
    }
    double act = activations;
    if (p->offload_activations > 0 && activations > act_one) {
        double moved = p->offload_activations * (activations - act_one);
        act -= moved;
        out->host += moved;
    }
    out->activations = act;
    double run = 0; /* buffers the framework allocates while it runs */
    int64_t m = hpgo_parplan_microbatches(p);
    /* FSDP2 on a shard group of one (dp x cp = 1, or shard_size 1; what
     * torchtitan runs without sharding, as it wraps every model in
     * fully_shard) copies through the same buffers as a sharded group (its
     * time is priced), but none is seen at the step's peak: on one H100 its
     * block peaked 3.2 GiB under the plain step's, where it holds 3.6 GiB
     * fewer of model states (profiles/h100-sxm5-torchtitan-steps.json,
     * titan-fsdp, with the 16-bit weights of the two compiled runs before it
     * taken out, tests/test_power.py).  Under torch's pipelining its fp32
     * gradient accumulation is held all the same. */
    if (p->zero >= 3) {
        if (d > 1) {
            double layer = max_layer_params;
            run += (p->reshard_after_forward ? 3 * layer : dense + layer) * wgather;
            run += layer * (gunsharded + 2 * gb);
        }
        if ((d > 1 || fsdp2_mp) && p->pp > 1 && m > 1)
            run += (accum_params >= 0 ? accum_params : dense) * gb;
    } else if (p->zero == 2 && d > 1) {
        double bucket = DS_REDUCE_BUCKET < dense ? DS_REDUCE_BUCKET : dense;
        run += (p->overlap_grad_reduce ? 2 : 1) * bucket * wb;
        /* a bucket reduced in wider gradients than the 16-bit ones it holds
         * (fp32 communication_data_type) is cast to a copy first
         * (stage_1_and_2.py gradient_reduction_w_predivide, average_tensor) */
        if (gb > wb)
            run += bucket * gb;
    }
    double allocated = out->weights + out->gradients + out->optimizer + act + run;
    double f = hpgo_alloc_frag(c, p->kernels);
    out->reserved = f > 0 && f < 1 ? allocated * f / (1 - f) : 0;
    out->other = other + run;
    out->total = allocated + other + out->reserved;
    out->capacity = c->gpu.hbm_bytes;
    out->margin = out->capacity - out->total;
    out->fits = out->total <= out->capacity;
    /* what a node's GPUs offload must fit its CPU memory */
    if (out->host > 0 && out->host * (double)c->levels[0].size > c->sys.host_memory)
        out->fits = 0;
}

void hpgo_memory_breakdown2(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int32_t precision,
                            double params, double expert_params, double max_layer_params,
                            double activations, double act_one, double other, hpgo_mem_t *out)
{
    hpgo_memory_breakdown3(c, p, precision, params, expert_params, max_layer_params, activations,
                           act_one, other, -1, out);
}

void hpgo_memory_breakdown(const hpgo_cluster_t *c, const hpgo_parplan_t *p, int32_t precision,
                           double params, double expert_params, double max_layer_params,
                           double activations, double other, hpgo_mem_t *out)
{
    hpgo_memory_breakdown2(c, p, precision, params, expert_params, max_layer_params, activations,
                           activations, other, out);
}
