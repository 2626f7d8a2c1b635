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
 * levels at once.  O(levels) per call. */
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
    double ring = bus_factor(op, n) * bytes / level_bw(&c->levels[top]) +
                  steps(op, n) * c->levels[top].latency;
    if (algo == HPGO_ALGO_RING)
        return ring;
    double hier = 0, buf = bytes;
    for (int32_t l = 0; l < c->n_levels; l++) {
        double f = (double)fan[l];
        if (f <= 1)
            continue;
        hier += bus_factor(op, f) * buf / level_bw(&c->levels[l]) + steps(op, f) * c->levels[l].latency;
        buf /= f;
    }
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
