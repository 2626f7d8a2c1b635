/* timeline.c - results and timelines of a simulated iteration (timeline.h).
 *
 * DESIGN: a result is three caller-owned arrays (stages, devices, events);
 * events grow by doubling up to HPGO_SIM_MAX_EVENTS and are trimmed to
 * their count when a run ends.  No threads, no globals. */
#include "timeline.h"

#include <stdlib.h>
#include <string.h>

static const char *const event_names[HPGO_EV__COUNT] = {
    [HPGO_EV_FORWARD] = "forward",
    [HPGO_EV_BACKWARD] = "backward",
    [HPGO_EV_SEND] = "send",
    [HPGO_EV_RECV] = "recv",
    [HPGO_EV_ALLREDUCE] = "all_reduce",
    [HPGO_EV_ALLGATHER] = "all_gather",
    [HPGO_EV_SCATTER] = "scatter",
    [HPGO_EV_BROADCAST] = "broadcast",
    [HPGO_EV_SPLIT] = "Split",
    [HPGO_EV_MATMUL] = "MatMul",
    [HPGO_EV_MATMUL_GRAD] = "MatMulGrad",
    [HPGO_EV_RELU] = "Relu",
    [HPGO_EV_RELU_GRAD] = "ReluGrad",
    [HPGO_EV_LOSS] = "Loss",
    [HPGO_EV_LOSS_GRAD] = "LossGrad",
    [HPGO_EV_ADD] = "Add",
    [HPGO_EV_IDENTITY] = "Identity",
    [HPGO_EV_CONCAT] = "Concat",
    [HPGO_EV_LAYERNORM] = "LayerNorm",
    [HPGO_EV_LAYERNORM_GRAD] = "LayerNormGrad",
    [HPGO_EV_SOFTMAX] = "Softmax",
    [HPGO_EV_SOFTMAX_GRAD] = "SoftmaxGrad",
    [HPGO_EV_GELU] = "Gelu",
    [HPGO_EV_GELU_GRAD] = "GeluGrad",
    [HPGO_EV_BATCH_MATMUL] = "BatchMatMul",
    [HPGO_EV_BATCH_MATMUL_GRAD] = "BatchMatMulGrad",
    [HPGO_EV_RESIDUAL_ADD] = "ResidualAdd",
    [HPGO_EV_RESIDUAL_ADD_GRAD] = "ResidualAddGrad",
    [HPGO_EV_BACKWARD_INPUT] = "backward_input",
    [HPGO_EV_BACKWARD_WEIGHT] = "backward_weight",
    [HPGO_EV_REDUCE_SCATTER] = "reduce_scatter",
    [HPGO_EV_OPTIMIZER] = "optimizer",
};

const char *hpgo_sim_event_name(int kind)
{
    if (kind < 0 || kind >= HPGO_EV__COUNT || !event_names[kind])
        return "?";
    return event_names[kind];
}

int hpgo_sim_result_new(int32_t n_stages, int32_t n_devices, hpgo_sim_result_t **out,
                        hpgo_err_t *err)
{
    *out = NULL;
    hpgo_sim_result_t *r = calloc(1, sizeof *r);
    if (!r)
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for a simulation result");
    r->stages = calloc((size_t)(n_stages > 0 ? n_stages : 1), sizeof *r->stages);
    r->devices = calloc((size_t)(n_devices > 0 ? n_devices : 1), sizeof *r->devices);
    if (!r->stages || !r->devices) {
        hpgo_sim_result_free(r);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for a simulation result");
    }
    r->n_stages = n_stages;
    r->n_devices = n_devices;
    *out = r;
    return HPGO_OK;
}

int hpgo_sim_result_add_event(hpgo_sim_result_t *r, const hpgo_sim_event_t *ev, hpgo_err_t *err)
{
    if (r->n_events == r->cap_events) {
        if (r->cap_events >= HPGO_SIM_MAX_EVENTS)
            return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                                "the timeline would exceed %lld events; simulate without a "
                                "timeline or with fewer micro-batches / devices",
                                (long long)HPGO_SIM_MAX_EVENTS);
        int64_t cap = r->cap_events ? 2 * r->cap_events : 1024;
        if (cap > HPGO_SIM_MAX_EVENTS)
            cap = HPGO_SIM_MAX_EVENTS;
        hpgo_sim_event_t *e = realloc(r->events, (size_t)cap * sizeof *e);
        if (!e)
            return hpgo_err_set(err, HPGO_E_NOMEM, 0, "out of memory for the timeline");
        r->events = e;
        r->cap_events = cap;
    }
    r->events[r->n_events++] = *ev;
    return HPGO_OK;
}

void hpgo_sim_result_trim(hpgo_sim_result_t *r)
{
    if (!r || !r->events || r->n_events == r->cap_events)
        return;
    /* keep the larger array when the system refuses the smaller one */
    size_t n = (size_t)(r->n_events ? r->n_events : 1);
    hpgo_sim_event_t *e = realloc(r->events, n * sizeof *e);
    if (e) {
        r->events = e;
        r->cap_events = (int64_t)n;
    }
}

void hpgo_sim_result_free(hpgo_sim_result_t *r)
{
    if (!r)
        return;
    free(r->stages);
    free(r->devices);
    free(r->events);
    free(r);
}

