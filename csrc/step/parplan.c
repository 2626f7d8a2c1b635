/* parplan.c - checks of the neutral parallel plan (see parplan.h). */
#include "parplan.h"

#include <math.h>

#include "cluster.h"

int64_t hpgo_parplan_microbatches(const hpgo_parplan_t *p)
{
    return p->global_batch / (p->micro_batch * p->dp);
}

/* Checks of an uneven plan's stage groups that need no cluster (the part
 * index, the placement and the shares' samples are checked by the engine,
 * which knows the cluster and the model). */
static int check_groups(const hpgo_parplan_t *p, hpgo_err_t *err)
{
    if (p->n_groups == 0)
        return p->groups ? hpgo_err_set(err, HPGO_E_INVALID, 0,
                                         "groups given with n_groups 0")
                         : HPGO_OK;
    if (p->n_groups != p->pp || !p->groups)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "an uneven plan needs one stage group per pipeline stage: %d groups "
                            "for pp=%d",
                            (int)p->n_groups, (int)p->pp);
    if (p->tp != 1 || p->dp != 1 || p->cp != 1 || p->ep != 1 || p->etp != 0 ||
        p->vstages != 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "an uneven plan gives tp and dp per stage group: the plan's tp, dp, "
                            "cp, ep and vstages must be 1 (etp 0)");
    if (p->schedule == HPGO_PS_INTERLEAVED || p->schedule == HPGO_PS_ZBV)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "an uneven plan runs one model stage per group: gpipe, 1f1b or zb-h1");
    for (int32_t k = 0; k < p->n_groups; k++) {
        const hpgo_stage_group_t *g = &p->groups[k];
        if ((g->part < 0 && !(g->part == HPGO_PART_MIXED && g->parts)) ||
            g->part >= HPGO_CLUSTER_MAX_PARTS || (g->parts && g->part != HPGO_PART_MIXED))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: part must be in 0..%d, or -1 (mixed) with parts, got "
                                "%d",
                                (int)k, HPGO_CLUSTER_MAX_PARTS - 1, (int)g->part);
        for (int32_t i = 0; g->parts && i < g->dp; i++)
            if (g->parts[i] < 0 || g->parts[i] >= HPGO_CLUSTER_MAX_PARTS)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "stage %d: parts[%d] must be in 0..%d, got %d", (int)k,
                                    (int)i, HPGO_CLUSTER_MAX_PARTS - 1, (int)g->parts[i]);
        if (g->tp < 1 || g->tp > 1024 || g->dp < 1 || g->dp > (1 << 24))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: tp must be in 1..1024 and dp in 1..2^24, got tp=%d "
                                "dp=%d",
                                (int)k, (int)g->tp, (int)g->dp);
        if (g->first_gpu < -1)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: first_gpu must be a GPU index or -1 (after the "
                                "previous stages), got %lld",
                                (int)k, (long long)g->first_gpu);
        if (g->shares) {
            double sum = 0;
            for (int32_t i = 0; i < g->dp; i++) {
                double s = g->shares[i];
                if (!(s > 0 && s <= 1))
                    return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                        "stage %d: share %d must be in (0, 1], got %g", (int)k,
                                        (int)i, s);
                sum += s;
            }
            /* shares are fractions written in decimal: their sum is 1 up to
             * the rounding of dp additions */
            if (fabs(sum - 1) > 1e-9 * g->dp)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "stage %d: the shares of its %d replicas sum to %.12g, not 1",
                                    (int)k, (int)g->dp, sum);
        }
        if (p->shard_size > 0 && g->dp % p->shard_size != 0)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "stage %d: shard_size %d must divide its dp=%d", (int)k,
                                (int)p->shard_size, (int)g->dp);
    }
    return HPGO_OK;
}

int64_t hpgo_parplan_shard(const hpgo_parplan_t *p)
{
    int64_t n = (int64_t)p->dp * p->cp;
    return p->shard_size > 0 && p->shard_size < n ? p->shard_size : n;
}

int32_t hpgo_parplan_etp(const hpgo_parplan_t *p) { return p->etp > 0 ? p->etp : p->tp; }

int64_t hpgo_parplan_edp(const hpgo_parplan_t *p)
{
    int64_t world = (int64_t)p->tp * p->cp * p->dp, g = (int64_t)hpgo_parplan_etp(p) * p->ep;
    return g > 0 && world % g == 0 ? world / g : 0;
}

void hpgo_parplan_ep_group(const hpgo_parplan_t *p, int64_t *size, int64_t *stride)
{
    int64_t etp = hpgo_parplan_etp(p);
    *size = p->ep;
    *stride = p->ep_outer ? etp * hpgo_parplan_edp(p) : etp;
}

void hpgo_parplan_edp_group(const hpgo_parplan_t *p, int64_t *size, int64_t *stride)
{
    int64_t etp = hpgo_parplan_etp(p);
    *size = hpgo_parplan_edp(p);
    *stride = p->ep_outer ? etp : etp * p->ep;
}

int hpgo_parplan_check_optimizer_zero(int32_t optimizer_impl, int32_t zero, hpgo_err_t *err)
{
    if (optimizer_impl == HPGO_OPT_MEGATRON_BF16_GRADS && zero > 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "optimizer_impl megatron_bf16_grads (Megatron's gradient buffer in "
                            "16 bits) runs with DDP or the distributed optimizer: zero must be 0 "
                            "or 1, got %d",
                            (int)zero);
    if (optimizer_impl == HPGO_OPT_APEX_BF16 && zero != 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "optimizer_impl apex_bf16 (Apex's DistributedFusedAdam) shards the "
                            "optimizer state only: zero must be 1, got %d",
                            (int)zero);
    return HPGO_OK;
}

int hpgo_parplan_check(const hpgo_parplan_t *p, hpgo_err_t *err)
{
    int rc;
    if (!p)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "plan: NULL");
    if (p->tp < 1 || p->tp > 1024 || p->dp < 1 || p->dp > (1 << 24) || p->cp < 1 ||
        p->cp > 1024 || p->ep < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "tp (1..1024), dp (1..2^24), cp (1..1024) and ep must be >= 1");
    if (p->pp < 1 || p->pp > HPGO_PLAN_MAX_PP)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "pp must be in 1..%d", HPGO_PLAN_MAX_PP);
    if (p->ep > (1 << 24) || p->etp < 0 || p->etp > 1024 || (p->ep_outer != 0 && p->ep_outer != 1) ||
        (p->overlap_ep != 0 && p->overlap_ep != 1) ||
        (p->dispatcher != HPGO_DISPATCH_ALLTOALL && p->dispatcher != HPGO_DISPATCH_DEDUP) ||
        (p->fp8_params != 0 && p->fp8_params != 1))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "ep must be in 1..2^24, etp in 0..1024 (0: = tp), ep_outer, "
                            "overlap_ep and fp8_params 0 or 1, dispatcher 0 (all-to-all) or 1 "
                            "(deduplicating)");
    if (p->overlap_ep && !(p->overlap_share > 0 && p->overlap_share <= 1))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "the overlap share must be in (0, 1], got %g", p->overlap_share);
    if (p->kernels < HPGO_KS_TE || p->kernels > HPGO_KS_EAGER_UNFUSED_NORM ||
        p->tp_overlap < HPGO_TPO_NONE || p->tp_overlap > HPGO_TPO_ASYNC ||
        p->cp_comm < HPGO_CP_P2P || p->cp_comm > HPGO_CP_TORCH_SDPA ||
        (p->recompute_method != HPGO_RCM_UNIFORM && p->recompute_method != HPGO_RCM_BLOCK))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "kernels (0 te, 1 compile, 2 eager, 3 compile-blocks, 4 "
                            "compile-fa2, 5 eager-unfused-norm), tp_overlap (0 none, 1 te, 2 "
                            "async), cp_comm (0 p2p, 1 all_gather, 2 a2a, 3 torch_sdpa) or "
                            "recompute_method (0 uniform, 1 block) out of range");
    if (p->attention != HPGO_ATT_AUTO && p->attention != HPGO_ATT_FLASH2)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "attention must be 0 (auto) or 1 (flash2), got %d", (int)p->attention);
    if (p->optimizer_impl < HPGO_OPT_MEGATRON || p->optimizer_impl > HPGO_OPT_MEGATRON_BF16_GRADS)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "optimizer_impl must be 0 (megatron), 1 (deepspeed_bf16), 2 "
                            "(apex_bf16) or 3 (megatron_bf16_grads), got %d",
                            (int)p->optimizer_impl);
    if (hpgo_parplan_check_optimizer_zero(p->optimizer_impl, p->zero, err) != HPGO_OK)
        return HPGO_E_INVALID;
    if (p->cross_entropy != HPGO_CE_AUTO && p->cross_entropy != HPGO_CE_UNFUSED &&
        p->cross_entropy != HPGO_CE_FUSED)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "cross_entropy must be 0 (auto), 1 (unfused) or 2 (fused), got %d",
                            (int)p->cross_entropy);
    if (p->cross_entropy == HPGO_CE_UNFUSED && p->kernels != HPGO_KS_TE)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "cross_entropy 1 (Megatron's unfused loss) needs kernels 0 (te)");
    if (p->cross_entropy == HPGO_CE_FUSED && p->kernels == HPGO_KS_TE)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "cross_entropy 2 (a fused loss kernel) needs a PyTorch kernel set: "
                            "kernels 0 (te) runs its own fused loss");
    if (p->recompute_layers < 0 || p->recompute_layers > (1 << 20) ||
        (p->recompute_layers > 0 && p->recompute != HPGO_RC_FULL))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "recompute_layers must be in 0..2^20, and > 0 only with full "
                            "recomputation");
    if (p->tp_overlap != HPGO_TPO_NONE && p->tp > 1 && !p->sequence_parallel)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "tp_overlap needs sequence_parallel (Megatron asserts it for "
                            "--tp-comm-overlap; async TP matches all-gather and reduce-scatter)");
    if (p->tp_overlap == HPGO_TPO_ASYNC && p->kernels != HPGO_KS_COMPILE &&
        p->kernels != HPGO_KS_COMPILE_BLOCKS && p->kernels != HPGO_KS_COMPILE_FA2)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "tp_overlap 'async' is an Inductor pass: it needs kernels 'compile'");
    if (p->tp_overlap == HPGO_TPO_TE && p->kernels != HPGO_KS_TE)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "tp_overlap 'te' is Transformer Engine's userbuffers: it needs "
                            "kernels 'te'");
    if (hpgo_parplan_edp(p) < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "etp x ep = %lld must divide tp x cp x dp = %lld (expert layers "
                            "regroup the GPUs of a pipeline stage)",
                            (long long)hpgo_parplan_etp(p) * p->ep,
                            (long long)p->tp * p->cp * p->dp);
    if (p->vstages < 1 || (int64_t)p->pp * p->vstages > HPGO_PLAN_MAX_STAGES)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "vstages must be >= 1 with pp x vstages <= %d", HPGO_PLAN_MAX_STAGES);
    if (p->schedule < 0 || p->schedule >= HPGO_PS__COUNT)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "unknown schedule %d", (int)p->schedule);
    if (p->schedule == HPGO_PS_INTERLEAVED) {
        if (p->vstages < 2 || p->pp < 2)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "the interleaved schedule needs pp >= 2 and vstages >= 2");
    } else if (p->schedule == HPGO_PS_ZBV) {
        if (p->vstages != 2)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "zb-v holds exactly two chunks per device: vstages must be 2");
    } else if (p->vstages != 1) {
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "vstages > 1 needs the interleaved-1f1b or zb-v schedule");
    }
    if (p->recompute < HPGO_RC_NONE || p->recompute > HPGO_RC_OP)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "recompute must be none, selective, full or selective-op");
    if (p->zero < 0 || p->zero > 3)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "zero must be 0, 1, 2 or 3");
    if (p->fp8_all_gather != 0 &&
        (p->fp8_all_gather != 1 || p->zero != 3 || p->kernels == HPGO_KS_TE))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "fp8_all_gather (0 or 1: torchao's float8 all-gather in FSDP2) "
                            "needs zero 3 and a PyTorch kernel set (compile, eager, "
                            "compile-blocks, compile-fa2)");
    if (p->fp8_recipe != HPGO_F8R_TENSORWISE &&
        (p->fp8_recipe < HPGO_F8R_ROWWISE || p->fp8_recipe > HPGO_F8R_ROWWISE_GW_HP ||
         p->kernels == HPGO_KS_TE || p->fp8_all_gather))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "fp8_recipe (0 tensorwise, 1 rowwise, 2 rowwise_with_gw_hp): the "
                            "rowwise recipes are torchao's, for a PyTorch kernel set, and have "
                            "no float8 all-gather");
    if ((p->reshard_after_forward != 0 && p->reshard_after_forward != 1) ||
        (p->offload_optimizer != 0 && p->offload_optimizer != 1))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "reshard_after_forward and offload_optimizer must be 0 or 1");
    if (!(p->offload_activations >= 0 && p->offload_activations <= 1))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "offload_activations must be in [0, 1], got %g",
                            p->offload_activations);
    if (p->shard_size < 0 ||
        (p->shard_size > 0 && p->n_groups == 0 &&
         ((int64_t)p->dp * p->cp) % p->shard_size != 0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "shard_size %d must be 0 (all replicas) or divide dp x cp = %lld",
                            (int)p->shard_size, (long long)p->dp * p->cp);
    if (p->shard_size > 0 && (p->n_groups > 0 || p->shard_size < (int64_t)p->dp * p->cp) &&
        p->zero < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "shard_size (hybrid sharding) needs zero >= 1");
    if ((rc = check_groups(p, err)) != HPGO_OK)
        return rc;
    if (p->micro_batch < 1 || p->global_batch < 1 || p->global_batch > ((int64_t)1 << 40))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "micro_batch and global_batch must be >= 1 (global_batch <= 2^40)");
    if (p->global_batch % ((int64_t)p->micro_batch * p->dp) != 0)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "global_batch %lld is not a multiple of micro_batch x dp = %lld",
                            (long long)p->global_batch, (long long)p->micro_batch * p->dp);
    int64_t m = hpgo_parplan_microbatches(p);
    if (m > HPGO_PLAN_MAX_MICROBATCHES)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0, "%lld micro-batches: at most %d", (long long)m,
                            HPGO_PLAN_MAX_MICROBATCHES);
    if (m * p->pp * p->vstages > HPGO_PLAN_MAX_OPS)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "micro-batches x model stages = %lld: at most %lld", 
                            (long long)(m * p->pp * p->vstages), (long long)HPGO_PLAN_MAX_OPS);
    return HPGO_OK;
}
