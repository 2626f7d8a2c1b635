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

/* Read and parse a file (format: spec section 2, README "Reading profiles").
 * On success *out is a new graph owned by the caller (hpgo_graph_free); on
 * failure *out is NULL and err (may be NULL) says why: HPGO_E_NOTFOUND (no
 * such file), HPGO_E_IO (a directory, unreadable), HPGO_E_PARSE for
 * malformed text (err->line = 1-based line, message "<file>:<line>: ..."),
 * HPGO_E_LIMIT past the limits above, HPGO_E_NOMEM.  Values are stored as
 * read: milliseconds and bytes, finite and >= 0 (NaN, infinities and
 * negative numbers are parse errors).  Thread-safe (no shared state). */
int hpgo_graph_load(const char *path, hpgo_graph_t **out, hpgo_err_t *err);

/* Parse len bytes of text (need not be NUL-terminated, not modified or
 * kept); name is used in messages.  Same results and errors as
 * hpgo_graph_load except the OS ones.  Thread-safe. */
int hpgo_graph_parse(const char *buf, size_t len, const char *name, hpgo_graph_t **out,
                     hpgo_err_t *err);

/* Free a graph from hpgo_graph_load/parse (NULL is a no-op). */
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

/* Build the ordered states of a parsed graph exactly as HPGO's import does
 * (spec section 3 with the canonical orders of sections 3.6/11/13: clean-up,
 * antichain DAG, depth-first state order, per-state sums).  g is only read
 * and may be shared between threads; on success *out is a new, immutable
 * hpgo_states_t owned by the caller (hpgo_states_free), ct in seconds per
 * profile batch, act/par/oa in bytes.  Errors (*out = NULL):
 *   HPGO_E_PARSE    a cycle or self-loop (err->line = line of an edge on it);
 *   HPGO_E_INVALID  no states: the cleaned graph has no nodes or no edges,
 *                   or its first source has no outgoing edge;
 *   HPGO_E_LIMIT    more than HPGO_MAX_STATES states, reachability bitsets
 *                   over 512 MiB (about 46,000 nodes), or more than 1e8
 *                   elementary set operations (very wide graphs);
 *   HPGO_E_NOMEM.
 * Messages start with the graph's name.  Thread-safe. */
int hpgo_states_build(const hpgo_graph_t *g, hpgo_states_t **out, hpgo_err_t *err);

/* Free states from hpgo_states_build (NULL is a no-op). */
void hpgo_states_free(hpgo_states_t *s);

#endif
