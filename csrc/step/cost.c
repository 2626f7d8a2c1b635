/* cost.c - collective and point-to-point costs (see cost.h).
 *
 * DESIGN: bandwidth terms are nccl-tests' bus-bandwidth factors (2(n-1)/n
 * for all-reduce, (n-1)/n for reduce-scatter, all-gather and all-to-all);
 * latency terms the textbook ring step counts (Thakur, Rabenseifner and
 * Gropp 2005).  A hierarchical all-reduce is a reduce-scatter inside each
 * unit, an all-reduce of the 1/f shard across units (one rail per GPU, all
 * in parallel), and an all-gather back: its cost is the sum over levels of
 * an all-reduce of the shrinking buffer.  An all-to-all moves, at each
 * level, the share of a rank's buffer addressed outside its unit, all
 * levels at once.  O(levels) per call.
 *
 * With c->sys.nccl_latency the latency term is NCCL's own prediction
 * instead of `latency` per ring step (src/graph/tuning.cc at NVIDIA/nccl
 * 5067397, ncclTopoTuneModel and ncclTopoGetAlgoTime; spec/stack-mechanisms.md
 * 5.1), for the Simple protocol that carries bulk transfers: ring = base
 * 8.4 us + (nsteps - nInterSteps) x max(3.4 us NVLink hop, 3 x 1.0 us network
 * overhead of an Intel host) + nInterSteps x 14 us network hop, nsteps = 2(n -
 * 1) for all-reduce and n - 1 for reduce-scatter / all-gather, nInterSteps the
 * same over nodes; a multi-node ring all-reduce x 1.4 (the "plateau effect",
 * x 1.9 before Ampere); tree all-reduce = 8.4 + 2 ((ranks per node - 1) x 4.0
 * + log2(nodes) x 14) us; all-reduce takes the lower of the two.  The graph's
 * own inter-node latency (latencyInter, 0 unless the network plugin reports
 * one) is left out.  The bandwidth term is unchanged. */
#include "cost.h"

#include <math.h>

int hpgo_group_fanout(const hpgo_cluster_t *c, int64_t size, int64_t stride,
                      int64_t fan[HPGO_CLUSTER_MAX_LEVELS], hpgo_err_t *err)
{
    if (size < 1 || stride < 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "group size and stride must be >= 1");
    int64_t total = hpgo_cluster_gpus(c);
    if (size > total || (size - 1) > (total - 1) / stride)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "a group of %lld GPUs at stride %lld does not fit %lld GPUs",
                            (long long)size, (long long)stride, (long long)total);
    int64_t below = 1;
    for (int32_t l = 0; l < HPGO_CLUSTER_MAX_LEVELS; l++) {
        if (l >= c->n_levels) {
            fan[l] = 1;
            continue;
        }
        int64_t unit = hpgo_cluster_unit(c, l);
        int64_t members;
        if (l == c->n_levels - 1)
            members = size;
        else if (stride >= unit) {
            if (stride % unit != 0 && size > 1)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "group stride %lld does not align with units of %lld GPUs",
                                    (long long)stride, (long long)unit);
            members = 1;
        } else {
            if (unit % stride != 0)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "group stride %lld does not divide units of %lld GPUs",
                                    (long long)stride, (long long)unit);
            members = unit / stride < size ? unit / stride : size;
        }
        if (members % below != 0 || (l == c->n_levels - 1 && size % below != 0))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "a group of %lld GPUs at stride %lld splits units unevenly",
                                (long long)size, (long long)stride);
        fan[l] = members / below;
        below = members;
    }
    return HPGO_OK;
}

static double bus_factor(int op, double n)
{
    if (n <= 1)
        return 0;
    return op == HPGO_COLL_ALLREDUCE ? 2 * (n - 1) / n : (n - 1) / n;
}

static double steps(int op, double n)
{
    if (n <= 1)
        return 0;
    return op == HPGO_COLL_ALLREDUCE ? 2 * (n - 1) : n - 1;
}

static double level_bw(const hpgo_level_t *l) { return l->coll_bandwidth * l->efficiency; }

/* NCCL tuner constants, microseconds (tuning.cc ncclTunerConstantsDefaults) */
#define NCCL_BASE_SIMPLE 8.4      /* baseLatencies, Tree and Ring, Simple */
#define NCCL_NVL_RING_SIMPLE 3.4  /* hwLatencies NVLINK, Ring, Simple */
#define NCCL_NVL_TREE_SIMPLE 4.0  /* hwLatencies NVLINK, Tree, Simple */
#define NCCL_NET_SIMPLE 14.0      /* hwLatencies NET, Ring and Tree, Simple */
#define NCCL_NET_OVERHEAD 1.0     /* getNetOverhead, x86 Intel (AMD: 2.0); x 3 for Simple */
#define NCCL_RING_PLATEAU 1.4     /* ncclTopoGetAlgoTime, compute capability >= 8.0 */
#define NCCL_RING_PLATEAU_OLD 1.9 /* ... before Ampere */

static double log2i(double x)
{
    double r = 0;
    while (x >= 2) {
        x /= 2;
        r += 1;
    }
    return r;
}

double hpgo_cost_nccl_latency(int op, double ranks, double nodes, int pre_ampere)
{
    if (ranks <= 1 || op == HPGO_COLL_ALLTOALL)
        return 0;
    if (nodes < 1)
        nodes = 1;
    int ar = op == HPGO_COLL_ALLREDUCE;
    double nsteps = ar ? 2 * (ranks - 1) : ranks - 1;
    double ninter = nodes <= 1 ? 0 : ar ? 2 * (nodes - 1) : nodes - 1;
    double intra = NCCL_NVL_RING_SIMPLE;
    if (nodes > 1 && 3 * NCCL_NET_OVERHEAD > intra)
        intra = 3 * NCCL_NET_OVERHEAD;
    double ring = NCCL_BASE_SIMPLE + (nsteps - ninter) * intra + ninter * NCCL_NET_SIMPLE;
    if (!ar)
        return ring * 1e-6;
    if (nodes > 1)
        ring *= pre_ampere ? NCCL_RING_PLATEAU_OLD : NCCL_RING_PLATEAU;
    double ppn = ranks / nodes;
    double tree = NCCL_BASE_SIMPLE +
                  2 * ((ppn - 1) * NCCL_NVL_TREE_SIMPLE + log2i(nodes) * NCCL_NET_SIMPLE);
    return (tree < ring ? tree : ring) * 1e-6;
}

double hpgo_cost_collective(const hpgo_cluster_t *c, int op, int64_t size, int64_t stride,
                            double bytes, int algo)
{
    int64_t fan[HPGO_CLUSTER_MAX_LEVELS];
    if (size <= 1 || bytes < 0 || hpgo_group_fanout(c, size, stride, fan, NULL) != HPGO_OK)
        return 0;
    int32_t top = 0;
    for (int32_t l = 0; l < c->n_levels; l++)
        if (fan[l] > 1)
            top = l;
    double n = (double)size;
    if (op == HPGO_COLL_ALLTOALL) {
        double t = 0, inside = 1;
        for (int32_t l = 0; l < c->n_levels; l++) {
            /* bytes that leave the rank's level-(l-1) unit cross level l */
            double out_share = (n - inside) / n;
            inside *= (double)fan[l];
            if (fan[l] <= 1 || out_share <= 0)
                continue;
            double tl = bytes * out_share / level_bw(&c->levels[l]);
            if (tl > t)
                t = tl;
        }
        return t + steps(op, n) * c->levels[top].latency;
    }
    int nccl = c->sys.nccl_latency;
    double lat_nccl = 0;
    if (nccl) {
        double nodes = 1;
        for (int32_t l = 1; l < c->n_levels; l++)
            nodes *= (double)fan[l];
        /* V100 (no tf32 peak) is the only pre-Ampere GPU of the presets */
        lat_nccl = hpgo_cost_nccl_latency(op, n, nodes, !(c->gpu.peak[HPGO_DT_TF32] > 0));
    }
    double ring = bus_factor(op, n) * bytes / level_bw(&c->levels[top]) +
                  (nccl ? lat_nccl : steps(op, n) * c->levels[top].latency);
    if (algo == HPGO_ALGO_RING)
        return ring;
    double hier = 0, buf = bytes;
    for (int32_t l = 0; l < c->n_levels; l++) {
        double f = (double)fan[l];
        if (f <= 1)
            continue;
        hier += bus_factor(op, f) * buf / level_bw(&c->levels[l]) +
                (nccl ? 0 : steps(op, f) * c->levels[l].latency);
        buf /= f;
    }
    hier += lat_nccl;
    if (algo == HPGO_ALGO_HIERARCHICAL)
        return hier;
    return hier < ring ? hier : ring;
}

double hpgo_cost_dispatch_dedup(const hpgo_cluster_t *c, int64_t size, int64_t stride,
                                double bytes, double k, double touched)
{
    int64_t fan[HPGO_CLUSTER_MAX_LEVELS];
    if (size <= 1 || bytes <= 0 || hpgo_group_fanout(c, size, stride, fan, NULL) != HPGO_OK)
        return 0;
    double nodes = 1;
    int32_t top = 0;
    for (int32_t l = 1; l < c->n_levels; l++) {
        nodes *= (double)fan[l];
        if (fan[l] > 1)
            top = l;
    }
    if (top == 0 || !(k > 0))
        return hpgo_cost_collective(c, HPGO_COLL_ALLTOALL, size, stride, bytes, HPGO_ALGO_AUTO);
    double g0 = (double)fan[0];
    if (touched > nodes)
        touched = nodes;
    if (touched > k)
        touched = k;
    /* cross-node: one copy per token and remote node touched; the slowest
     * level crossed carries it */
    double remote = bytes / k * touched * (nodes - 1) / nodes;
    double t_out = 0;
    for (int32_t l = 1; l < c->n_levels; l++)
        if (fan[l] > 1) {
            double tl = remote / level_bw(&c->levels[l]);
            if (tl > t_out)
                t_out = tl;
        }
    /* in-node: every copy whose expert sits on another GPU of the node
     * (sent directly, or forwarded after crossing) */
    double t_in = g0 > 1 ? bytes * (g0 - 1) / g0 / level_bw(&c->levels[0]) : 0;
    return (t_out > t_in ? t_out : t_in) + (nodes - 1) * c->levels[top].latency +
           (g0 - 1) * c->levels[0].latency;
}

double hpgo_cost_p2p(const hpgo_cluster_t *c, int32_t level, double bytes)
{
    if (level < 0)
        level = 0;
    if (level >= c->n_levels)
        level = c->n_levels - 1;
    const hpgo_level_t *l = &c->levels[level];
    return l->latency + bytes / (l->bandwidth * l->efficiency);
}

int32_t hpgo_cost_level_between(const hpgo_cluster_t *c, int64_t a, int64_t b)
{
    for (int32_t l = 0; l < c->n_levels; l++) {
        int64_t u = hpgo_cluster_unit(c, l);
        if (a / u == b / u)
            return l;
    }
    return c->n_levels - 1;
}
