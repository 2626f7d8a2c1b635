/* profile.h - PipeDream graph.txt reader and the HPGO/PipeDream layer-state
 * builder (spec/hpgo-compat.md sections 2 and 3).
 *
 * Two steps, both pure C and thread-safe on distinct objects:
 *   hpgo_graph_load/parse  : text -> hpgo_graph_t (nodes and edges in file order)
 *   hpgo_states_build      : hpgo_graph_t -> hpgo_states_t (ordered antichain states
 *                            with per-state sums and predecessor lists)
 * Both results are immutable after construction and owned by the caller
 * (free with the matching _free; _free(NULL) is a no-op). */
#ifndef HPGO_PROFILE_H
#define HPGO_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Documented limits, enforced with HPGO_E_LIMIT. */
#define HPGO_MAX_FILE_BYTES ((size_t)1 << 30) /* 1 GiB of profile text */
#define HPGO_MAX_NODES 1000000                /* node lines */
#define HPGO_MAX_EDGES 4000000                /* edge lines */
#define HPGO_MAX_STATES 10000                 /* antichain states after import (see README) */

typedef struct hpgo_node {
    char *id;           /* e.g. "node7" */
    char *desc;         /* e.g. "Layer_0" */
    double fwd_ms;      /* forward time for one pbs batch, milliseconds */
    double bwd_ms;      /* backward time, milliseconds */
    double act_bytes;   /* output activation bytes for pbs samples (list values summed) */
    double par_bytes;   /* parameter bytes */
    int64_t stage_id;   /* optional 4th field "stage_id=<int>", -1 when absent */
    long line;          /* 1-based line of the node in the file */
} hpgo_node_t;

typedef struct hpgo_graph {
    char *name;         /* file name as shown in messages (valid UTF-8, at most ~240 bytes) */
    int32_t n_nodes;
    hpgo_node_t *nodes; /* in file order */
    int32_t n_edges;
    int32_t *edge_src;  /* node index, file order, duplicates kept */
    int32_t *edge_dst;
    long *edge_line;    /* 1-based line of each edge */
} hpgo_graph_t;

/* Read and parse a file.  HPGO_E_NOTFOUND / HPGO_E_IO for OS errors,
 * HPGO_E_PARSE (err->line set, message names file and line) for malformed
 * text, HPGO_E_LIMIT past the limits above, HPGO_E_NOMEM. */
int hpgo_graph_load(const char *path, hpgo_graph_t **out, hpgo_err_t *err);

/* Parse len bytes of text (need not be NUL-terminated); name is used in
 * messages.  Same errors as hpgo_graph_load except the OS ones. */
int hpgo_graph_parse(const char *buf, size_t len, const char *name, hpgo_graph_t **out,
                     hpgo_err_t *err);

void hpgo_graph_free(hpgo_graph_t *g);

/* Copy len bytes of text into dst (cap >= 8 bytes, NUL-terminated) for
 * quoting in a message: valid UTF-8 is kept, invalid bytes and control
 * characters become "\xNN", and a cut never splits a character ("..."
 * marks it), so dst is always valid UTF-8.  Thread-safe. */
void hpgo_snip(char *dst, size_t cap, const char *src, size_t len);

typedef struct hpgo_states {
    int32_t n;          /* L, number of states (>= 1 on success) */
    double *ct;         /* ct(s): sum over cover(s) of (fwd+bwd)/1000, seconds per pbs batch */
    double *act;        /* act(s): activation bytes summed over cover(s) */
    double *par;        /* par(s): parameter bytes summed over cover(s) */
    double *oa;         /* oa(s): activation bytes crossing the cut after s */
    int32_t *pred_off;  /* n+1 offsets into pred_idx (CSR) */
    int32_t *pred_idx;  /* preds(s), ascending state indices */
    char **label;       /* label of each state: DESC of its antichain's first node */
    int32_t *set_off;   /* n+1 offsets into set_idx (CSR) */
    int32_t *set_idx;   /* X_s = augment(antichain_s) as graph node indices, augment order */
} hpgo_states_t;

/* Build the ordered states of a parsed graph (clean-up, antichain DAG,
 * state order, sums).  Does not modify g.  HPGO_E_PARSE (with the line of an
 * offending edge) for a cycle; HPGO_E_NOPLAN-free: a graph whose cleaned
 * version has no edges gives HPGO_E_INVALID ("no edges"); HPGO_E_LIMIT when
 * more than HPGO_MAX_STATES states would be needed. */
int hpgo_states_build(const hpgo_graph_t *g, hpgo_states_t **out, hpgo_err_t *err);

void hpgo_states_free(hpgo_states_t *s);

#endif
