/* cost.h - every collective and transfer priced once, over a group of GPUs
 * on a cluster (cluster.h).  All engines that price communication on a
 * cluster call these.
 *
 * A group is `size` GPUs at global ranks r0, r0 + stride, ...: tensor
 * parallel groups have stride 1, data-parallel groups stride tp, and so on
 * (ranks are numbered node-major).  The group's fan-out at level l is the
 * number of level-(l-1) units it spans inside one level-l unit.
 *
 * Model (alpha-beta, spec/training-model.md 4.1-4.2): a ring over the
 * whole group runs at the bandwidth of the highest level it crosses; a
 * hierarchical collective runs one ring per level on a buffer divided by
 * the fan-outs below (reduce-scatter up, all-gather down); "auto" takes
 * the faster.  Bytes are the full (unsharded) buffer for all-reduce,
 * reduce-scatter and all-gather, and the per-rank send buffer for
 * all-to-all.  Seconds out.  Thread-safe, no state. */
#ifndef HPGO_COST_H
#define HPGO_COST_H

#include <stdint.h>

#include "cluster.h"

enum {
    HPGO_COLL_ALLREDUCE = 0,
    HPGO_COLL_REDUCE_SCATTER,
    HPGO_COLL_ALLGATHER,
    HPGO_COLL_ALLTOALL,
    HPGO_COLL__COUNT
};
enum { HPGO_ALGO_AUTO = 0, HPGO_ALGO_RING, HPGO_ALGO_HIERARCHICAL };

/* Fan-out of the group at each level of c (fan[l] >= 1; the product is
 * size).  HPGO_E_INVALID when size or stride < 1 or the group does not fit
 * the cluster or does not align with its levels. */
int hpgo_group_fanout(const hpgo_cluster_t *c, int64_t size, int64_t stride,
                      int64_t fan[HPGO_CLUSTER_MAX_LEVELS], hpgo_err_t *err);

/* Seconds of collective `op` of `bytes` over the group (size, stride);
 * 0 for a group of one.  The group must be valid (hpgo_group_fanout). */
double hpgo_cost_collective(const hpgo_cluster_t *c, int op, int64_t size, int64_t stride,
                            double bytes, int algo);

/* Seconds of a MoE token dispatch (or combine) over the group (size,
 * stride) by a node-deduplicating dispatcher (DeepEP's internode kernels,
 * Megatron's flex dispatcher): `bytes` is the rank's routed copies (`k` per
 * token), each token crosses once to each of the `touched` nodes (expected,
 * its own included) that hold one of its experts, and is forwarded inside
 * the destination node over level 0; cross-node and in-node transfers
 * pipeline (the slower one counts).  A group inside one node is priced as
 * the all-to-all. */
double hpgo_cost_dispatch_dedup(const hpgo_cluster_t *c, int64_t size, int64_t stride,
                                double bytes, double k, double touched);

/* NCCL's predicted latency, seconds, of collective `op` (Simple protocol;
 * the lower of ring and tree for all-reduce) over `ranks` GPUs on `nodes`
 * nodes (cost.c has the constants and their source); 0 for all-to-all. */
double hpgo_cost_nccl_latency(int op, double ranks, double nodes, int pre_ampere);

/* Seconds of a point-to-point transfer between two GPUs whose lowest
 * common unit is at `level` (0: same node). */
double hpgo_cost_p2p(const hpgo_cluster_t *c, int32_t level, double bytes);

/* Level of the lowest unit that holds both global ranks a and b. */
int32_t hpgo_cost_level_between(const hpgo_cluster_t *c, int64_t a, int64_t b);

#endif
