/* test_profile_c.c - C-level tests of the profile reader and state builder:
 * the API contract (NULL handling, buffers that are not NUL-terminated,
 * error records) and a deterministic mutation fuzz over the valid corpus
 * files given on the command line.  Built and run by tests/test_profile_c.py,
 * under AddressSanitizer/UBSan when the compiler supports them.
 * Prints "ok <n>" and exits 0, or prints the failure and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"

static int failures = 0;

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);           \
            failures++;                                                                        \
        }                                                                                      \
    } while (0)

static int valid_utf8(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        int k = *u < 0x80 ? 1 : (*u >> 5) == 6 ? 2 : (*u >> 4) == 14 ? 3 : (*u >> 3) == 30 ? 4 : 0;
        if (k == 0)
            return 0;
        for (int i = 1; i < k; i++)
            if ((u[i] & 0xC0) != 0x80)
                return 0;
        u += k;
    }
    return 1;
}

/* Parse exactly len bytes from a heap copy of that size (no terminator), so
 * the sanitizer catches any read past the end; build states when it parses. */
static int run(const char *text, size_t len, hpgo_err_t *err, int32_t *n_states)
{
    char *buf = malloc(len ? len : 1);
    if (!buf)
        return HPGO_E_NOMEM;
    memcpy(buf, text, len);
    hpgo_graph_t *g = NULL;
    hpgo_states_t *st = NULL;
    int rc = hpgo_graph_parse(buf, len, "fuzz", &g, err);
    free(buf);
    if (rc == HPGO_OK) {
        rc = hpgo_states_build(g, &st, err);
        if (rc == HPGO_OK) {
            *n_states = st->n;
            for (int32_t s = 0; s < st->n; s++)
                for (int32_t k = st->pred_off[s]; k < st->pred_off[s + 1]; k++)
                    if (st->pred_idx[k] >= s)
                        failures++;
        }
    }
    hpgo_states_free(st);
    hpgo_graph_free(g);
    return rc;
}

static void test_api(void)
{
    hpgo_err_t err;
    hpgo_graph_t *g = (hpgo_graph_t *)&err; /* must be overwritten with NULL */
    CHECK(hpgo_graph_parse(NULL, 5, "x", &g, &err) == HPGO_E_INVALID);
    CHECK(hpgo_graph_parse("a", 1, "x", NULL, &err) == HPGO_E_INVALID);
    CHECK(hpgo_graph_load(NULL, &g, &err) == HPGO_E_INVALID);
    CHECK(hpgo_states_build(NULL, NULL, NULL) == HPGO_E_INVALID);
    hpgo_graph_free(NULL);
    hpgo_states_free(NULL);

    const char *ok = "a -- Input -- f=1, b=2, c=3, d=4\nb -- B -- f=1, b=2, c=3, d=4\n"
                     "c -- C -- f=1, b=2, c=3, d=4\n\ta -- b\n\tb -- c";
    int32_t n = -1;
    CHECK(run(ok, strlen(ok), NULL, &n) == HPGO_OK && n == 2); /* err may be NULL */
    CHECK(run(ok, strlen(ok), &err, &n) == HPGO_OK && err.code == HPGO_OK && err.msg[0] == 0);
    /* cut before its last edge: only the Input's edge is left */
    CHECK(run(ok, strlen(ok) - 8, &err, &n) == HPGO_E_INVALID && err.line == 0);
    CHECK(strcmp(err.msg, "fuzz: profile has no edges after removing the input node(s)") == 0);

    CHECK(run("", 0, &err, &n) == HPGO_E_PARSE && err.line == 1);
    CHECK(strcmp(err.msg, "fuzz:1: empty profile (no node lines)") == 0);

    CHECK(hpgo_graph_load("/nonexistent/dir/graph.txt", &g, &err) == HPGO_E_NOTFOUND && !g);
    CHECK(hpgo_graph_load("/", &g, &err) == HPGO_E_IO && !g);

    /* a hand-built graph with an out-of-range edge is refused, not read */
    hpgo_node_t nodes[1];
    memset(nodes, 0, sizeof nodes);
    nodes[0].id = "x";
    nodes[0].desc = "X";
    int32_t src = 0, dst = 7;
    long line = 1;
    hpgo_graph_t bad = {"hand", 1, nodes, 1, &src, &dst, &line};
    hpgo_states_t *st = NULL;
    CHECK(hpgo_states_build(&bad, &st, &err) == HPGO_E_INVALID && !st);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 20);
    *len = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    return buf;
}

/* Mutations of valid files: each result must be OK or a clean error whose
 * message starts with the name, is valid UTF-8, and carries a line for
 * parse errors. */
static long fuzz(char **files, int n_files, int rounds)
{
    unsigned long long x = 88172645463325252ULL;
    static const char alphabet[] = " -\t\n\r,=[];.e0123456789x\x00\xff\xc3\xa9";
    long runs = 0;
    for (int fi = 0; fi < n_files; fi++) {
        size_t len;
        char *orig = slurp(files[fi], &len);
        if (!orig) {
            fprintf(stderr, "cannot read %s\n", files[fi]);
            failures++;
            continue;
        }
        char *work = malloc(len + 64);
        for (int r = 0; r < rounds && work; r++) {
            memcpy(work, orig, len);
            size_t n = len;
            int edits = 1 + r % 4;
            for (int e = 0; e < edits; e++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                size_t at = n ? (size_t)(x % n) : 0;
                switch ((x >> 40) % 4) {
                case 0: /* replace a byte */
                    if (n)
                        work[at] = alphabet[(x >> 20) % (sizeof alphabet - 1)];
                    break;
                case 1: /* truncate */
                    n = at;
                    break;
                case 2: /* delete a byte */
                    if (n) {
                        memmove(work + at, work + at + 1, n - at - 1);
                        n--;
                    }
                    break;
                default: /* insert a byte */
                    if (n < len + 60) {
                        memmove(work + at + 1, work + at, n - at);
                        work[at] = alphabet[(x >> 24) % (sizeof alphabet - 1)];
                        n++;
                    }
                    break;
                }
            }
            hpgo_err_t err;
            int32_t ns = 0;
            int rc = run(work, n, &err, &ns);
            runs++;
            if (rc == HPGO_OK)
                continue;
            int good = (rc == HPGO_E_PARSE || rc == HPGO_E_INVALID || rc == HPGO_E_LIMIT) &&
                       err.code == rc && strncmp(err.msg, "fuzz", 4) == 0 &&
                       valid_utf8(err.msg) && (rc != HPGO_E_PARSE || err.line >= 1);
            if (!good) {
                fprintf(stderr, "%s round %d: rc %d line %ld msg '%s'\n", files[fi], r, rc,
                        err.line, err.msg);
                failures++;
            }
        }
        free(work);
        free(orig);
    }
    return runs;
}

int main(int argc, char **argv)
{
    test_api();
    long runs = fuzz(argv + 1, argc - 1, 3000);
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("ok %ld\n", runs);
    return 0;
}
