/* timeline.h - what one simulated training iteration leaves: the iteration
 * time, per-stage statistics (busy time, bubble fraction, activations in
 * flight, peak memory split into weights / gradients / optimizer state /
 * activations), per-device statistics and, when asked for, the timeline:
 * one event per operation and device (forward, backward, send, receive,
 * all-reduce, ...).  Three engines fill it: the step engine (engine.h), the
 * pipeline of given stage times of the hpgo/ wing (pipeline_sim.h) and
 * DistIR's op-level studies (sim_distir.h).
 *
 * Units: seconds (double), bytes (double).  Results are owned by the caller
 * and freed with hpgo_sim_result_free; they are immutable after the run and
 * may be read from any thread. */
#ifndef HPGO_TIMELINE_H
#define HPGO_TIMELINE_H

#include <stdint.h>

#include "err.h"

#define HPGO_SIM_MAX_EVENTS ((int64_t)1 << 24) /* per timeline (about 0.7 GB) */
#define HPGO_SIM_MAX_MICROBATCHES (1 << 20)
#define HPGO_SIM_MAX_DEVICES 1024           /* device ids are in [0, HPGO_SIM_MAX_DEVICES) */

/* Schedules of the simulators of stage times (pipeline_sim.h, sim_distir.h). */
enum {
    HPGO_SCHED_1F1B = 0,      /* DAPPLE early backward: warm-up, one forward one backward, flush */
    HPGO_SCHED_GPIPE = 1,     /* all forwards, then all backwards, flush */
    HPGO_SCHED_PIPEDREAM = 2  /* 1F1B without flush, weight stashing (asynchronous) */
};

/* Event kinds; hpgo_sim_event_name gives their printable names. */
enum {
    HPGO_EV_FORWARD = 0,
    HPGO_EV_BACKWARD,
    HPGO_EV_SEND,
    HPGO_EV_RECV,
    HPGO_EV_ALLREDUCE,
    HPGO_EV_ALLGATHER,
    HPGO_EV_SCATTER,
    HPGO_EV_BROADCAST,
    HPGO_EV_SPLIT,
    HPGO_EV_MATMUL,
    HPGO_EV_MATMUL_GRAD,
    HPGO_EV_RELU,
    HPGO_EV_RELU_GRAD,
    HPGO_EV_LOSS,
    HPGO_EV_LOSS_GRAD,
    HPGO_EV_ADD,
    HPGO_EV_IDENTITY,
    HPGO_EV_CONCAT,
    HPGO_EV_LAYERNORM,
    HPGO_EV_LAYERNORM_GRAD,
    HPGO_EV_SOFTMAX,
    HPGO_EV_SOFTMAX_GRAD,
    HPGO_EV_GELU,
    HPGO_EV_GELU_GRAD,
    HPGO_EV_BATCH_MATMUL,
    HPGO_EV_BATCH_MATMUL_GRAD,
    HPGO_EV_RESIDUAL_ADD,
    HPGO_EV_RESIDUAL_ADD_GRAD,
    HPGO_EV_BACKWARD_INPUT,  /* training-step engine (engine.h) */
    HPGO_EV_BACKWARD_WEIGHT,
    HPGO_EV_REDUCE_SCATTER,
    HPGO_EV_OPTIMIZER,
    HPGO_EV__COUNT
};

/* Static printable name of an event kind ("forward", "MatMul", ...); "?" when unknown. */
const char *hpgo_sim_event_name(int kind);

typedef struct hpgo_sim_event {
    double start;       /* seconds from the start of the iteration */
    double duration;    /* seconds */
    int32_t device;     /* device id */
    int16_t kind;       /* HPGO_EV_* */
    int16_t lane;       /* 0: the device's compute stream (blocking ops); 1: asynchronous transfers */
    int32_t stage;      /* pipeline stage, -1 when none */
    int32_t microbatch; /* micro-batch, -1 when none (PipeDream numbers across iterations) */
    int32_t layer;      /* layer / block index, -1 when none */
    int32_t peer;       /* other device of a send / receive, -1 otherwise */
} hpgo_sim_event_t;

typedef struct hpgo_sim_stage_stats {
    double busy;            /* compute seconds of the stage's busiest device in one iteration */
    double bubble;          /* 1 - busy / iteration_time (0 when the iteration time is 0) */
    int32_t max_in_flight;  /* most micro-batches whose forward started and backward has not ended */
    double weight_bytes;    /* parameters held per device (times the stashed versions for PipeDream) */
    double gradient_bytes;  /* gradient buffers per device */
    double optimizer_bytes; /* optimizer state per device */
    double activation_bytes;/* peak of everything else per device (stashed activations, buffers) */
    double peak_bytes;      /* peak memory of the stage's fullest device */
} hpgo_sim_stage_stats_t;

typedef struct hpgo_sim_device_stats {
    int32_t device;     /* device id */
    int32_t stage;      /* stage it runs, -1 for a host that only sends inputs */
    double end;         /* seconds: when its last operation ends */
    double busy;        /* compute seconds */
    double peak_bytes;  /* peak memory */
} hpgo_sim_device_stats_t;

typedef struct hpgo_sim_result {
    double iteration_time;          /* seconds */
    int32_t n_stages;
    hpgo_sim_stage_stats_t *stages;
    int32_t n_devices;
    hpgo_sim_device_stats_t *devices; /* ascending device id */
    int64_t n_events;
    int64_t cap_events;
    hpgo_sim_event_t *events;       /* in generation order; NULL when no timeline was asked for */
} hpgo_sim_result_t;

/* Allocate a zeroed result with n_stages stage and n_devices device records
 * (used by the engines).  HPGO_E_NOMEM. */
int hpgo_sim_result_new(int32_t n_stages, int32_t n_devices, hpgo_sim_result_t **out,
                        hpgo_err_t *err);
/* Append an event, growing the array; HPGO_E_LIMIT past HPGO_SIM_MAX_EVENTS,
 * HPGO_E_NOMEM.  Not thread-safe on one result. */
int hpgo_sim_result_add_event(hpgo_sim_result_t *r, const hpgo_sim_event_t *ev, hpgo_err_t *err);
/* Shrink the event array to the events (the doubling growth leaves up to
 * half of it unused): 40 bytes per event after it.  Never fails. */
void hpgo_sim_result_trim(hpgo_sim_result_t *r);
void hpgo_sim_result_free(hpgo_sim_result_t *r);

#endif
