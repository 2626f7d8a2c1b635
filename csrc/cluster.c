/* cluster.c - cluster presets, validation and the per-kernel time of a GPU.
 *
 * DESIGN: presets are tables of published figures (spec/training-model.md
 * sections 4.3, 6.1, 6.2, 7), each with its source below.  The efficiency
 * curves are Calculon's step tables (calculon/processor.py, memory.py,
 * systems/a100_80g.json), with the matrix curve capped at the measured
 * "maximum achievable matmul FLOPS" of each GPU (stas00/ml-engineering:
 * A100 271.2 of 312 TFLOP/s = 0.869, H100 794.5 of 989 = 0.803): no GPU
 * reaches Calculon's 0.95 on a real GEMM.  A kernel's time is its compute
 * time plus its memory time (Calculon's "no_overlap" mode, the one its
 * presets use).  Nothing here is fitted to a validation run.
 *
 * dapple-v100 reproduces HPGO's constants exactly (topo.h): 2 machines x 8
 * V100 16 GB, 25 GB/s inside a machine, 1 GB/s point to point and 3 GB/s
 * for all-reduce across machines, no latency, efficiency 1. */
#include "cluster.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "topo.h"

#define GFLOP 1e9
#define MB 1e6

static void set_steps(hpgo_gpu_t *g, int which, int n, const double *thr, const double *eff,
                      double cap)
{
    g->n_steps[which] = n;
    for (int i = 0; i < n; i++) {
        g->steps[which][i].threshold = thr[i];
        g->steps[which][i].efficiency = eff[i] < cap ? eff[i] : cap;
    }
}

/* Calculon's curves; `mamf` caps the matrix curve. */
static void calculon_curves(hpgo_gpu_t *g, double mamf)
{
    static const double mthr[] = {128 * GFLOP, 16 * GFLOP, 1 * GFLOP, 0};
    static const double meff[] = {0.95, 0.90, 0.60, 0.10};
    static const double vthr[] = {16 * GFLOP, 1 * GFLOP, 0};
    static const double veff[] = {0.95, 0.50, 0.10};
    static const double hthr[] = {100 * MB, 10 * MB, 1 * MB, 0};
    static const double heff[] = {0.90, 0.75, 0.60, 0.30};
    set_steps(g, HPGO_EFF_MATRIX, 4, mthr, meff, mamf);
    set_steps(g, HPGO_EFF_VECTOR, 3, vthr, veff, 1.0);
    set_steps(g, HPGO_EFF_MEMORY, 4, hthr, heff, 1.0);
}

static void gpu_v100(hpgo_gpu_t *g, double hbm)
{
    /* V100 SXM2 datasheet: 15.7 fp32, 125 fp16 tensor (no bf16, tf32 or
     * fp8: the fp16 rate stands in for "16-bit"), 31.4 fp16 vector, 900 GB/s.
     * No published MAMF figure: A100's ratio is used (UNVERIFIED). */
    memset(g, 0, sizeof *g);
    strcpy(g->name, "V100-SXM2");
    g->sms = 80;
    g->peak[HPGO_DT_FP32] = 15.7e12;
    g->peak[HPGO_DT_BF16] = 125e12;
    g->vector_flops = 31.4e12;
    g->hbm_bytes = hbm;
    g->hbm_bandwidth = 900e9;
    calculon_curves(g, 0.869);
}

static void gpu_a100(hpgo_gpu_t *g, double hbm, double bw)
{
    /* A100 SXM4 datasheet: 19.5 fp32, 156 tf32, 312 bf16; 78 fp16 vector
     * (Calculon a100_80g); MAMF 271.2 / 312. */
    memset(g, 0, sizeof *g);
    strcpy(g->name, hbm > 50e9 ? "A100-SXM4-80GB" : "A100-SXM4-40GB");
    g->sms = 108;
    g->peak[HPGO_DT_FP32] = 19.5e12;
    g->peak[HPGO_DT_TF32] = 156e12;
    g->peak[HPGO_DT_BF16] = 312e12;
    g->vector_flops = 78e12;
    g->hbm_bytes = hbm;
    g->hbm_bandwidth = bw;
    calculon_curves(g, 271.2 / 312.0);
}

static void gpu_h100(hpgo_gpu_t *g, double hbm, double bw, const char *name)
{
    /* H100 SXM5 whitepaper: 66.9 fp32, 494.7 tf32, 989.4 bf16, 1978.9 fp8,
     * 133.8 fp16 vector; MAMF 794.5 / 989.  H200: same die, 141 GB at 4.8 TB/s. */
    memset(g, 0, sizeof *g);
    strcpy(g->name, name);
    g->sms = 132;
    g->peak[HPGO_DT_FP32] = 66.9e12;
    g->peak[HPGO_DT_TF32] = 494.7e12;
    g->peak[HPGO_DT_BF16] = 989.4e12;
    g->peak[HPGO_DT_FP8] = 1978.9e12;
    g->vector_flops = 133.8e12;
    g->hbm_bytes = hbm;
    g->hbm_bandwidth = bw;
    calculon_curves(g, 794.5 / 989.0);
}

static hpgo_level_t level(int32_t size, double bw, double coll_bw, double latency, double eff)
{
    hpgo_level_t l = {size, bw, coll_bw, latency, eff};
    return l;
}

static const char *const preset_names[] = {"dapple-v100", "dgx1-v100",   "dgx-a100-40gb",
                                           "dgx-a100-80gb", "dgx-h100", "dgx-h200", NULL};

const char *hpgo_cluster_preset_name(int i)
{
    if (i < 0 || i >= (int)(sizeof preset_names / sizeof preset_names[0]))
        return NULL;
    return preset_names[i];
}

int hpgo_cluster_preset(const char *name, int32_t nodes, hpgo_cluster_t *out, hpgo_err_t *err)
{
    if (!name || !out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "cluster preset: NULL argument");
    if (nodes < 0 || nodes > (1 << 20))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "nodes must be between 1 and 1048576 (got %d)", (int)nodes);
    hpgo_cluster_t c;
    memset(&c, 0, sizeof c);
    c.n_levels = 2;
    int32_t dflt = 1;
    if (strcmp(name, "dapple-v100") == 0) {
        gpu_v100(&c.gpu, 16e9); /* HPGO's fixed 16 GB */
        c.levels[0] = level(8, HPGO_NVLINK_BW, HPGO_NVLINK_BW, 0, 1);
        c.levels[1] = level(2, HPGO_ETHERNET_BW, HPGO_ETHERNET_NCCL_BW, 0, 1);
        dflt = 2;
    } else if (strcmp(name, "dgx1-v100") == 0) {
        /* DGX-1: NVLink2 6 x 25 GB/s per direction per GPU; 4 x 100 Gb/s EDR
         * per node = 6.25 GB/s per GPU.  Efficiencies: Calculon's defaults
         * (0.65 NVLink, 0.9 IB); latencies Calculon's (10 us, 20 us). */
        gpu_v100(&c.gpu, 32e9);
        c.levels[0] = level(8, 150e9, 150e9, 10e-6, 0.65);
        c.levels[1] = level(1, 6.25e9, 6.25e9, 20e-6, 0.9);
    } else if (strcmp(name, "dgx-a100-40gb") == 0 || strcmp(name, "dgx-a100-80gb") == 0) {
        /* DGX A100 (Selene): NVLink3 300 GB/s per direction, measured
         * all-reduce bus bandwidth 200-210 GB/s (nccl-tests #149, #178): 0.68;
         * 8 x 200 Gb/s HDR = 25 GB/s per GPU, measured 85 of 100 GB/s per
         * node on 3 nodes (nccl-tests #119): 0.85. */
        if (strcmp(name, "dgx-a100-40gb") == 0)
            gpu_a100(&c.gpu, 40e9, 1555e9);
        else
            gpu_a100(&c.gpu, 80e9, 2039e9);
        c.levels[0] = level(8, 300e9, 300e9, 10e-6, 0.68);
        c.levels[1] = level(1, 25e9, 25e9, 20e-6, 0.85);
    } else if (strcmp(name, "dgx-h100") == 0 || strcmp(name, "dgx-h200") == 0) {
        /* DGX H100/H200: NVLink4 450 GB/s per direction, ring bus bandwidth
         * about 370 GB/s (nccl-tests #212): 0.82; 8 x 400 Gb/s ConnectX-7 =
         * 50 GB/s per GPU (DGX BasePOD), efficiency 0.9 (Calculon). */
        if (strcmp(name, "dgx-h100") == 0)
            gpu_h100(&c.gpu, 80e9, 3.35e12, "H100-SXM5-80GB");
        else
            gpu_h100(&c.gpu, 141e9, 4.8e12, "H200-SXM-141GB");
        c.levels[0] = level(8, 450e9, 450e9, 10e-6, 0.82);
        c.levels[1] = level(1, 50e9, 50e9, 20e-6, 0.9);
    } else {
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "unknown cluster preset '%.60s' (known: dapple-v100, dgx1-v100, "
                            "dgx-a100-40gb, dgx-a100-80gb, dgx-h100, dgx-h200)",
                            name);
    }
    c.levels[1].size = nodes ? nodes : dflt;
    snprintf(c.name, sizeof c.name, "%s", name);
    *out = c;
    return hpgo_cluster_check(out, err);
}

static int bad_num(double x) { return !isfinite(x) || x < 0; }

int hpgo_cluster_check(const hpgo_cluster_t *c, hpgo_err_t *err)
{
    if (!c)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "cluster: NULL");
    const hpgo_gpu_t *g = &c->gpu;
    static const char *const dt[] = {"fp32", "tf32", "bf16", "fp8"};
    for (int i = 0; i < HPGO_DT__COUNT; i++)
        if (bad_num(g->peak[i]))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "gpu peak %s must be a finite number >= 0", dt[i]);
    if (!(g->peak[HPGO_DT_BF16] > 0) || !isfinite(g->peak[HPGO_DT_BF16]))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "gpu peak bf16 must be > 0");
    for (int i = 0; i < HPGO_DT__COUNT; i++)
        if (g->peak[i] > 0 && g->peak[i] < HPGO_CLUSTER_MIN_RATE)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "gpu peak %s must be 0 (none) or >= %g FLOP/s, got %g", dt[i],
                                HPGO_CLUSTER_MIN_RATE, g->peak[i]);
    if (g->vector_flops < HPGO_CLUSTER_MIN_RATE || g->hbm_bandwidth < HPGO_CLUSTER_MIN_RATE)
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "gpu vector_flops and hbm_bandwidth must be >= %g (FLOP/s, bytes/s), "
                            "got %g and %g",
                            HPGO_CLUSTER_MIN_RATE, g->vector_flops, g->hbm_bandwidth);
    if (!(g->vector_flops > 0) || !isfinite(g->vector_flops))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "gpu vector_flops must be > 0");
    if (!(g->hbm_bytes > 0) || !isfinite(g->hbm_bytes))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "gpu memory (hbm_bytes) must be > 0");
    if (!(g->hbm_bandwidth > 0) || !isfinite(g->hbm_bandwidth))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "gpu hbm_bandwidth must be > 0");
    if (g->sms < 0 || g->sms > 100000)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "gpu multiprocessors must be in 0..100000");
    static const char *const cv[] = {"matrix", "vector", "memory", "fp8 matrix", "attention"};
    for (int w = 0; w < HPGO_EFF__COUNT; w++) {
        int32_t n = g->n_steps[w];
        if (n == 0 && w >= HPGO_EFF__REQUIRED)
            continue; /* optional curve left out */
        if (n < 1 || n > HPGO_EFF_MAX_STEPS)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "gpu %s efficiency needs 1 to %d steps", cv[w], HPGO_EFF_MAX_STEPS);
        for (int32_t i = 0; i < n; i++) {
            const hpgo_eff_step_t *s = &g->steps[w][i];
            if (bad_num(s->threshold) || !(s->efficiency > 0 && s->efficiency <= 1))
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "gpu %s efficiency step %d: threshold >= 0 and efficiency "
                                    "in (0, 1] required",
                                    cv[w], (int)i);
            if (i > 0 && !(s->threshold < g->steps[w][i - 1].threshold))
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "gpu %s efficiency thresholds must decrease", cv[w]);
        }
        if (g->steps[w][n - 1].threshold != 0)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "gpu %s efficiency: the last step's threshold must be 0", cv[w]);
    }
    if (c->n_levels < 1 || c->n_levels > HPGO_CLUSTER_MAX_LEVELS)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "a cluster needs 1 to %d levels",
                            HPGO_CLUSTER_MAX_LEVELS);
    int64_t total = 1;
    for (int32_t l = 0; l < c->n_levels; l++) {
        const hpgo_level_t *v = &c->levels[l];
        if (v->size < 1)
            return hpgo_err_set(err, HPGO_E_INVALID, 0, "level %d: size must be >= 1", (int)l);
        if (!(v->bandwidth > 0) || !isfinite(v->bandwidth) || !(v->coll_bandwidth > 0) ||
            !isfinite(v->coll_bandwidth))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "level %d: bandwidths must be finite and > 0", (int)l);
        if (v->bandwidth < HPGO_CLUSTER_MIN_RATE || v->coll_bandwidth < HPGO_CLUSTER_MIN_RATE)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "level %d: bandwidths must be >= %g bytes/s, got %g and %g",
                                (int)l, HPGO_CLUSTER_MIN_RATE, v->bandwidth, v->coll_bandwidth);
        if (bad_num(v->latency))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "level %d: latency must be finite and >= 0", (int)l);
        if (!(v->efficiency > 0 && v->efficiency <= 1))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "level %d: efficiency must be in (0, 1]", (int)l);
        total *= v->size;
        if (total > HPGO_CLUSTER_MAX_GPUS)
            return hpgo_err_set(err, HPGO_E_LIMIT, 0, "a cluster has at most %lld GPUs",
                                (long long)HPGO_CLUSTER_MAX_GPUS);
    }
    return HPGO_OK;
}

int64_t hpgo_cluster_unit(const hpgo_cluster_t *c, int32_t level)
{
    int64_t u = 1;
    for (int32_t l = 0; l <= level && l < c->n_levels; l++)
        u *= c->levels[l].size;
    return u;
}

int64_t hpgo_cluster_gpus(const hpgo_cluster_t *c) { return hpgo_cluster_unit(c, c->n_levels - 1); }

double hpgo_gpu_efficiency(const hpgo_gpu_t *g, int which, double size)
{
    const hpgo_eff_step_t *s = g->steps[which];
    for (int32_t i = 0; i < g->n_steps[which]; i++)
        if (size >= s[i].threshold)
            return s[i].efficiency;
    return s[g->n_steps[which] - 1].efficiency;
}

double hpgo_gpu_op_time(const hpgo_gpu_t *g, int dtype, int op, double flops, double bytes)
{
    double t = 0;
    if (flops > 0) {
        double peak = op == HPGO_OP_VECTOR ? g->vector_flops : g->peak[dtype];
        int curve = HPGO_EFF_MATRIX;
        if (op == HPGO_OP_VECTOR)
            curve = HPGO_EFF_VECTOR;
        else if (op == HPGO_OP_ATTENTION && g->n_steps[HPGO_EFF_ATTENTION] > 0)
            curve = HPGO_EFF_ATTENTION;
        else if (dtype == HPGO_DT_FP8 && g->n_steps[HPGO_EFF_FP8] > 0)
            curve = HPGO_EFF_FP8;
        t += flops / (peak * hpgo_gpu_efficiency(g, curve, flops));
    }
    if (bytes > 0)
        t += bytes / (g->hbm_bandwidth * hpgo_gpu_efficiency(g, HPGO_EFF_MEMORY, bytes));
    return t;
}
