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
 * dapple-v100 reproduces HPGO's constants exactly (cluster.h, read by topo.h): 2 machines x 8
 * V100 16 GB, 25 GB/s inside a machine, 1 GB/s point to point and 3 GB/s
 * for all-reduce across machines, no latency, efficiency 1. */
#include "cluster.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


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

/* Curves hpgo measured on the GPU itself (`hpgo profile kernels`, fitted by
 * `hpgo calibrate`, hpgo.calibrate.fit): matrix (bf16 GEMMs), fp8 GEMMs
 * and fused attention (cuDNN, Transformer Engine's back end) by a kernel's
 * FLOPs, from large to small.  The GEMM curve is capped at its largest
 * GEMMs' rate: the mid-size GEMMs the profile times alone run above it at
 * the boost clock, where back to back in a training step they run at the
 * clock the board's power limit leaves, as the largest do ("Power limits":
 * a GEMM held to 700 W runs at 0.87-0.89 of its rate in bursts).  The
 * vector and memory curves stay Calculon's: the memory curve fitted to
 * device copies prices the element-wise kernels hpgo also timed (torchao's
 * casts, profiles/h100-sxm5-float8-casts.json) 10-15 % slow, Calculon's
 * within 5 %.  tests/test_calibrate.py checks these tables against the fit
 * of the shipped profiles. */
static const double MEAS_MTHR[] = {256 * GFLOP, 64 * GFLOP, 16 * GFLOP, 4 * GFLOP,
                                   1 * GFLOP,   0.25 * GFLOP, 0};
static const double MEAS_ATHR[] = {256 * GFLOP, 64 * GFLOP, 16 * GFLOP, 4 * GFLOP, 1 * GFLOP, 0};

/* One GPU's fitted efficiencies at the thresholds above */
typedef struct measured {
    double matrix[7], fp8[7], attention[6];
} measured_t;

/* H100 SXM5 80 GB at 700 W (profiles/h100-sxm5-kernels.json) */
static const measured_t MEASURED_H100 = {
    {0.8137, 0.8989, 0.7331, 0.8272, 0.2102, 0.0651, 0.0651},
    {0.7451, 0.688, 0.4663, 0.2972, 0.0781, 0.0196, 0.0196},
    {0.5184, 0.3212, 0.1526, 0.0576, 0.0093, 0.0093}};

/* H200 SXM 141 GB at 700 W (profiles/h200-sxm-kernels.json) */
static const measured_t MEASURED_H200 = {
    {0.7608, 0.8299, 0.787, 0.9943, 0.3517, 0.0827, 0.0827},
    {0.704, 0.6454, 0.4322, 0.3778, 0.0813, 0.0143, 0.0143},
    {0.5217, 0.3691, 0.1909, 0.0941, 0.0364, 0.0364}};

/* The GPU's measured curves, the GEMM curve capped at its largest bucket */
static void measured_curves(hpgo_gpu_t *g, const measured_t *m)
{
    set_steps(g, HPGO_EFF_MATRIX, 7, MEAS_MTHR, m->matrix, m->matrix[0]);
    set_steps(g, HPGO_EFF_FP8, 7, MEAS_MTHR, m->fp8, 1.0);
    set_steps(g, HPGO_EFF_ATTENTION, 6, MEAS_ATHR, m->attention, 1.0);
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

static void gpu_v100_sxm3(hpgo_gpu_t *g)
{
    /* V100 SXM3 32 GB at 450 W (DGX-2H): 2.1 PFLOP/s fp16 tensor per 16 GPUs
     * (DGX-2H announcement, pcper.com / tomshardware.fr) = 131.25 per GPU,
     * as NVIDIA's Megatron-LM v1.0 note has it (62.4 TFLOP/s, "48 % of the
     * theoretical peak" of one DGX-2H GPU: 130); 900 GB/s and the SXM2's
     * fp32 and vector rates (spec/stack-mechanisms.md 8: recalled,
     * UNVERIFIED); A100's MAMF ratio as for the SXM2. */
    gpu_v100(g, 32e9);
    strcpy(g->name, "V100-SXM3-32GB");
    g->peak[HPGO_DT_BF16] = 2.1e15 / 16;
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


/* The host side of a node: CPU memory per node, the GPU's host link
 * (PCIe x16 per GPU, per direction: Gen3 16 GB/s, Gen4 32 GB/s, Gen5 64
 * GB/s, PCI-SIG link rates) and the node's CPU memory bandwidth (channels x
 * transfer rate x 8 bytes of both sockets, from the CPUs' datasheets). */
static hpgo_system_t host(double mem, double link, double cpu_bw)
{
    /* allocator reserve 0: the large-scale stacks run the caching allocator
     * with expandable segments (torchtitan's run_train.sh sets
     * PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), which maps pages
     * into one growing segment as GMLake's stitching does; no measured
     * figure for what it still loses (HPGO_ALLOC_FRAG_GMLAKE: without it) */
    /* latency: `latency` per ring step (Calculon's figures, which the
     * Korthikanti reproduction is checked with); NCCL's tuning model is the
     * alternative (nccl_latency = 1, cost.c) */
    hpgo_system_t s = {mem, link, cpu_bw, 0, 0, 0};
    return s;
}

static void gpu_h100_pcie(hpgo_gpu_t *g)
{
    /* H100 PCIe (NVIDIA H100 spec table, product brief PB-11133-001): 114
     * SMs, 51.2 fp32, 378 tf32, 756 bf16, 1513 fp8 dense, 80 GB HBM2e at
     * 2.0 TB/s, 300-350 W.  Vector 16-bit: twice fp32 as on the SXM5 (133.8
     * = 2 x 66.9) [derived].  No published MAMF: the SXM5's ratio
     * (UNVERIFIED; calibrate with `hpgo profile kernels`). */
    memset(g, 0, sizeof *g);
    strcpy(g->name, "H100-PCIe-80GB");
    g->sms = 114;
    g->peak[HPGO_DT_FP32] = 51.2e12;
    g->peak[HPGO_DT_TF32] = 378e12;
    g->peak[HPGO_DT_BF16] = 756e12;
    g->peak[HPGO_DT_FP8] = 1513e12;
    g->vector_flops = 2 * 51.2e12;
    g->hbm_bytes = 80e9;
    g->hbm_bandwidth = 2.0e12;
    calculon_curves(g, 794.5 / 989.0);
}

static void gpu_b200(hpgo_gpu_t *g)
{
    /* B200 (HGX / DGX, 1000 W; glennklockwood B200 page, spec/training-model.md
     * 7.1): 80 fp32, 1100 tf32, 2250 bf16, 4500 fp8 dense; 180 GB usable in a
     * DGX B200 (1.44 TB per 8, NVIDIA BasePOD), 8 TB/s; MAMF about 1745 of
     * 2250 (stas00/ml-engineering, TM 6.2).  Vector 16-bit: twice fp32 as on
     * H100 [derived, UNVERIFIED]; 148 SMs (two dies of 74; CUDA's device
     * properties as FlashAttention-4's and CUTLASS's B200 kernels size their
     * grids to them). */
    memset(g, 0, sizeof *g);
    strcpy(g->name, "B200-180GB");
    g->sms = 148;
    g->peak[HPGO_DT_FP32] = 80e12;
    g->peak[HPGO_DT_TF32] = 1100e12;
    g->peak[HPGO_DT_BF16] = 2250e12;
    g->peak[HPGO_DT_FP8] = 4500e12;
    g->vector_flops = 2 * 80e12;
    g->hbm_bytes = 180e9;
    g->hbm_bandwidth = 8e12;
    calculon_curves(g, 1745.0 / 2250.0);
}

static hpgo_level_t level(int32_t size, double bw, double coll_bw, double latency, double eff)
{
    hpgo_level_t l = {size, bw, coll_bw, latency, eff};
    return l;
}

static const char *const preset_names[] = {
    "dapple-v100", "dgx1-v100",  "dgx-a100-40gb",    "dgx-a100-80gb", "dgx-h100",  "dgx-h200",
    "dgx1-v100-16gb", "dgx2h-v100", "grand-teton-h100", "h100-pcie",     "dgx-b200", NULL};

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
        dflt = 2; /* HPGO's constants only: no host, allocator or NCCL model */
    } else if (strcmp(name, "dgx1-v100") == 0 || strcmp(name, "dgx1-v100-16gb") == 0) {
        /* DGX-1: NVLink2 6 x 25 GB/s per direction per GPU; 4 x 100 Gb/s EDR
         * per node = 6.25 GB/s per GPU.  Efficiencies: Calculon's defaults
         * (0.65 NVLink, 0.9 IB); latencies Calculon's (10 us, 20 us). */
        gpu_v100(&c.gpu, strcmp(name, "dgx1-v100") == 0 ? 32e9 : 16e9);
        if (strcmp(name, "dgx1-v100-16gb") == 0)
            strcpy(c.gpu.name, "V100-SXM2-16GB");
        c.levels[0] = level(8, 150e9, 150e9, 10e-6, 0.65);
        c.levels[1] = level(1, 6.25e9, 6.25e9, 20e-6, 0.9);
        /* DGX-1 datasheet: 512 GB DDR4, 2 x Xeon E5-2698 v4 (4 x DDR4-2400
         * channels each: 2 x 76.8 GB/s), PCIe Gen3 */
        c.sys = host(512e9, 16e9, 153.6e9);
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
        /* DGX A100 datasheet: 1 TB (2 TB option), 2 x AMD EPYC 7742 (8 x
         * DDR4-3200 channels each: 2 x 204.8 GB/s), PCIe Gen4 */
        c.sys = host(1e12, 32e9, 409.6e9);
    } else if (strcmp(name, "dgx-h100") == 0 || strcmp(name, "dgx-h200") == 0) {
        /* DGX H100/H200: the GPUs' curves as hpgo measured them
         * (MEASURED_H100, MEASURED_H200); NVLink4 450 GB/s per
         * direction, ring bus bandwidth about 370 GB/s (nccl-tests #212):
         * 0.82; 8 x 400 Gb/s ConnectX-7 = 50 GB/s per GPU (DGX BasePOD),
         * efficiency 0.9 (Calculon). */
        if (strcmp(name, "dgx-h100") == 0) {
            gpu_h100(&c.gpu, 80e9, 3.35e12, "H100-SXM5-80GB");
            measured_curves(&c.gpu, &MEASURED_H100);
        } else {
            gpu_h100(&c.gpu, 141e9, 4.8e12, "H200-SXM-141GB");
            measured_curves(&c.gpu, &MEASURED_H200);
        }
        c.levels[0] = level(8, 450e9, 450e9, 10e-6, 0.82);
        c.levels[1] = level(1, 50e9, 50e9, 20e-6, 0.9);
        /* DGX H100 datasheet: 2 TB, 2 x Xeon Platinum 8480C (8 x DDR5-4800
         * channels each: 2 x 307.2 GB/s), PCIe Gen5 */
        c.sys = host(2e12, 64e9, 614.4e9);
    } else if (strcmp(name, "dgx2h-v100") == 0) {
        /* DGX-2H: 16 V100 SXM3 on 12 NVSwitch, 150 GB/s per direction per GPU
         * (NVLink2, 6 x 25 GB/s), Calculon's NVLink efficiency as for DGX-1;
         * 8 x 100 Gb/s EDR per 16 GPUs = 6.25 GB/s per GPU (DGX-2 datasheet;
         * spec/stack-mechanisms.md 8); 1.5 TB DDR4, 2 x Xeon Platinum 8174 (6 x
         * DDR4-2666 channels each: 2 x 128 GB/s), PCIe Gen3 */
        gpu_v100_sxm3(&c.gpu);
        c.levels[0] = level(16, 150e9, 150e9, 10e-6, 0.65);
        c.levels[1] = level(1, 6.25e9, 6.25e9, 20e-6, 0.9);
        c.sys = host(1.5e12, 16e9, 256e9);
    } else if (strcmp(name, "grand-teton-h100") == 0) {
        /* Meta Grand Teton as in torchtitan's benchmarks
         * (benchmarks/llama3_h100_202412_torchtitan.md): 8 H100 with 96 GB
         * HBM2e at 2.4 TB/s, 500 W power limit, NVLink, 400 Gb/s per GPU.  The
         * SXM5's measured curves at the clock the 500 W limit leaves
         * (hpgo_gpu_clock_factor: 0.869 of the 700 W part's, from the power
         * measured on H100 SXM5s; the HBM2e part's memory power is taken as
         * the HBM3 part's, ASSUMED); HBM-bound kernels see the lower bandwidth.  NVLink and NIC
         * efficiencies as DGX H100 (ASSUMED); host side not published (0: no
         * offloading). */
        gpu_h100(&c.gpu, 96e9, 2.4e12, "H100-HBM2e-96GB-500W");
        measured_curves(&c.gpu, &MEASURED_H100);
        c.gpu.power_limit = 500;
        c.levels[0] = level(8, 450e9, 450e9, 10e-6, 0.82);
        c.levels[1] = level(1, 50e9, 50e9, 20e-6, 0.9);
        c.sys = host(0, 0, 0);
    } else if (strcmp(name, "h100-pcie") == 0) {
        /* 8 H100 PCIe per server on a PCIe Gen5 x16 switch fabric: 64 GB/s
         * per direction (PCI-SIG), at the network's 0.9 (Calculon's default,
         * ASSUMED); the NVLink bridges of GPU pairs are not modelled.  One 400
         * Gb/s NIC per GPU and the host of a DGX H100 (ASSUMED: the product
         * brief leaves the server to the vendor). */
        gpu_h100_pcie(&c.gpu);
        c.levels[0] = level(8, 64e9, 64e9, 10e-6, 0.9);
        c.levels[1] = level(1, 50e9, 50e9, 20e-6, 0.9);
        c.sys = host(2e12, 64e9, 614.4e9);
    } else if (strcmp(name, "dgx-b200") == 0) {
        /* DGX B200 (NVIDIA BasePOD): NVLink5 900 GB/s per direction, the
         * NVLink efficiency measured on DGX H100 (ASSUMED: no B200 figure); 8 x
         * 400 Gb/s ConnectX-7 = 50 GB/s per GPU at 0.9; 2 TB, 2 x Xeon
         * Platinum 8570 (8 x DDR5-5600 channels each: 2 x 358.4 GB/s), PCIe
         * Gen5 */
        gpu_b200(&c.gpu);
        c.levels[0] = level(8, 900e9, 900e9, 10e-6, 0.82);
        c.levels[1] = level(1, 50e9, 50e9, 20e-6, 0.9);
        c.sys = host(2e12, 64e9, 716.8e9);
    } else {
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "unknown cluster preset '%.60s' (known: dapple-v100, dgx1-v100, "
                            "dgx1-v100-16gb, dgx2h-v100, dgx-a100-40gb, dgx-a100-80gb, "
                            "dgx-h100, dgx-h200, grand-teton-h100, h100-pcie, dgx-b200)",
                            name);
    }
    c.levels[1].size = nodes ? nodes : dflt;
    snprintf(c.name, sizeof c.name, "%s", name);
    *out = c;
    return hpgo_cluster_check(out, err);
}

static int bad_num(double x) { return !isfinite(x) || x < 0; }

static int check_one(const hpgo_cluster_t *c, hpgo_err_t *err);

/* A level joining the parts: the checks of a cluster level but its size. */
static int check_join(const hpgo_level_t *v, hpgo_err_t *err)
{
    if (!(v->bandwidth >= HPGO_CLUSTER_MIN_RATE) || !isfinite(v->bandwidth) ||
        !(v->coll_bandwidth >= HPGO_CLUSTER_MIN_RATE) || !isfinite(v->coll_bandwidth))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "join: bandwidths must be finite and >= %g bytes/s, got %g and %g",
                            HPGO_CLUSTER_MIN_RATE, v->bandwidth, v->coll_bandwidth);
    if (bad_num(v->latency))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "join: latency must be finite and >= 0");
    if (!(v->efficiency > 0 && v->efficiency <= 1))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "join: efficiency must be in (0, 1]");
    return HPGO_OK;
}

int hpgo_cluster_check(const hpgo_cluster_t *c, hpgo_err_t *err)
{
    if (!c)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "cluster: NULL");
    int rc = check_one(c, err);
    if (rc != HPGO_OK)
        return rc;
    if (c->n_parts != 0) {
        if (c->n_parts < 2 || c->n_parts > HPGO_CLUSTER_MAX_PARTS || !c->parts)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "parts: a cluster of several GPU types has 2 to %d parts, got %d",
                                HPGO_CLUSTER_MAX_PARTS, (int)c->n_parts);
        int64_t total = 0;
        for (int32_t k = 0; k < c->n_parts; k++) {
            const hpgo_cluster_t *q = &c->parts[k];
            if (q->n_parts != 0)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "parts[%d]: a part cannot have parts of its own", (int)k);
            if (q->n_slow != 0)
                return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                    "parts[%d]: slowed GPUs belong to the whole cluster "
                                    "(its speeds), not to a part", (int)k);
            hpgo_err_t sub;
            rc = check_one(q, &sub);
            if (rc != HPGO_OK)
                return hpgo_err_set(err, rc, 0, "parts[%d] (%.48s): %s", (int)k, q->name,
                                    sub.msg);
            total += hpgo_cluster_gpus(q);
            if (total > HPGO_CLUSTER_MAX_GPUS)
                return hpgo_err_set(err, HPGO_E_LIMIT, 0, "a cluster has at most %lld GPUs",
                                    (long long)HPGO_CLUSTER_MAX_GPUS);
        }
        /* gpu / levels / sys repeat part 0's: the readers of a one-type
         * cluster see part 0 */
        const hpgo_cluster_t *p0 = &c->parts[0];
        if (strcmp(c->gpu.name, p0->gpu.name) != 0 || c->gpu.hbm_bytes != p0->gpu.hbm_bytes ||
            c->gpu.peak[HPGO_DT_BF16] != p0->gpu.peak[HPGO_DT_BF16] ||
            c->n_levels != p0->n_levels || c->levels[0].size != p0->levels[0].size)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "a cluster with parts repeats parts[0]'s gpu and levels");
        rc = check_join(&c->join, err);
        if (rc != HPGO_OK)
            return rc;
    }
    if (c->n_slow < 0 || c->n_slow > HPGO_CLUSTER_MAX_SLOW || (c->n_slow > 0 && !c->slow))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "speeds: 0 to %d slowed GPUs, got %d",
                            HPGO_CLUSTER_MAX_SLOW, (int)c->n_slow);
    int64_t n = hpgo_cluster_gpus(c);
    for (int32_t i = 0; i < c->n_slow; i++) {
        const hpgo_gpu_speed_t *s = &c->slow[i];
        if (s->gpu < 0 || s->gpu >= n)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "speeds[%d]: GPU %lld is not in the cluster's %lld GPUs", (int)i,
                                (long long)s->gpu, (long long)n);
        if (i > 0 && !(s->gpu > c->slow[i - 1].gpu))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "speeds[%d]: GPUs must be listed once each, in increasing order",
                                (int)i);
        if (!(s->speed >= HPGO_CLUSTER_MIN_SPEED && s->speed <= 1.0 / HPGO_CLUSTER_MIN_SPEED))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "speeds[%d]: GPU %lld's speed factor must be a finite number in "
                                "[%g, %g], got %g",
                                (int)i, (long long)s->gpu, HPGO_CLUSTER_MIN_SPEED,
                                1.0 / HPGO_CLUSTER_MIN_SPEED, s->speed);
    }
    return HPGO_OK;
}

static int check_one(const hpgo_cluster_t *c, hpgo_err_t *err)
{
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
    if (bad_num(g->power_limit))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "gpu power_limit must be a finite number "
                            ">= 0 (W; 0: none)");
    if (g->power_limit > 0 && g->power_limit < HPGO_HOPPER_STEP_W) {
        /* the measured power model is the Hopper SXM die's (132 SMs) */
        if (!(g->sms == 132 && g->peak[HPGO_DT_BF16] >= 700e12 &&
              g->peak[HPGO_DT_BF16] <= 1000e12))
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "gpu power_limit below %g W is modelled for the Hopper SXM "
                                "die only (132 SMs, bf16 peak 700-1000 TFLOP/s)",
                                HPGO_HOPPER_STEP_W);
        if (g->power_limit < 2 * HPGO_HOPPER_IDLE_W)
            return hpgo_err_set(err, HPGO_E_INVALID, 0,
                                "gpu power_limit must be 0 (none) or >= %g W (twice the "
                                "idle draw), got %g", 2 * HPGO_HOPPER_IDLE_W, g->power_limit);
    }
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
    const hpgo_system_t *y = &c->sys;
    if (bad_num(y->host_memory) || bad_num(y->host_bandwidth) || bad_num(y->host_mem_bandwidth))
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "host_memory, host_bandwidth and host_memory_bandwidth must be "
                            "finite numbers >= 0");
    if (!(y->alloc_frag >= 0 && y->alloc_frag <= 0.9))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "allocator_fragmentation must be in [0, 0.9]");
    if (!(y->jitter >= 0 && y->jitter <= 10))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "jitter must be in [0, 10]");
    if (y->nccl_latency != 0 && y->nccl_latency != 1)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "nccl_latency must be 0 or 1");
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

int64_t hpgo_cluster_gpus(const hpgo_cluster_t *c)
{
    if (c->n_parts < 2 || !c->parts)
        return hpgo_cluster_unit(c, c->n_levels - 1);
    int64_t n = 0;
    for (int32_t k = 0; k < c->n_parts; k++)
        n += hpgo_cluster_gpus(&c->parts[k]);
    return n;
}

const hpgo_cluster_t *hpgo_cluster_part(const hpgo_cluster_t *c, int32_t k)
{
    if (c->n_parts < 2 || !c->parts)
        return k == 0 ? c : NULL;
    return k >= 0 && k < c->n_parts ? &c->parts[k] : NULL;
}

int32_t hpgo_cluster_part_of(const hpgo_cluster_t *c, int64_t gpu, int64_t *local)
{
    int64_t first = 0;
    int32_t n = c->n_parts < 2 || !c->parts ? 1 : c->n_parts;
    for (int32_t k = 0; k < n; k++) {
        int64_t g = hpgo_cluster_gpus(hpgo_cluster_part(c, k));
        if (gpu >= first && gpu < first + g) {
            if (local)
                *local = gpu - first;
            return k;
        }
        first += g;
    }
    return -1;
}

double hpgo_cluster_gpu_speed(const hpgo_cluster_t *c, int64_t gpu)
{
    /* binary search of the sorted, unique list */
    int32_t lo = 0, hi = c->slow ? c->n_slow : 0;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (c->slow[mid].gpu < gpu)
            lo = mid + 1;
        else
            hi = mid;
    }
    return c->slow && lo < c->n_slow && c->slow[lo].gpu == gpu ? c->slow[lo].speed : 1.0;
}

double hpgo_gpu_efficiency(const hpgo_gpu_t *g, int which, double size)
{
    const hpgo_eff_step_t *s = g->steps[which];
    for (int32_t i = 0; i < g->n_steps[which]; i++)
        if (size >= s[i].threshold)
            return s[i].efficiency;
    return s[g->n_steps[which] - 1].efficiency;
}

double hpgo_gpu_clock_factor(const hpgo_gpu_t *g)
{
    if (!(g->power_limit > 0) || g->power_limit >= HPGO_HOPPER_STEP_W)
        return 1;
    return pow((g->power_limit - HPGO_HOPPER_IDLE_W) / (HPGO_HOPPER_STEP_W - HPGO_HOPPER_IDLE_W),
               1 / HPGO_HOPPER_POWER_EXP);
}

double hpgo_gpu_op_time(const hpgo_gpu_t *g, int dtype, int op, double flops, double bytes)
{
    double t = 0;
    if (flops > 0) {
        double peak = op == HPGO_OP_VECTOR ? g->vector_flops
                                           : g->peak[dtype] * hpgo_gpu_clock_factor(g);
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
