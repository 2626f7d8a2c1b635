/* graph.c - reader of PipeDream graph.txt profiles (spec/hpgo-compat.md
 * sections 2 and 13).
 *
 * DESIGN: the whole text is held in memory and scanned once, line by line.
 * Each line is checked for binary content (NUL, other C0 control bytes,
 * DEL) and for valid UTF-8 while its end is searched, so a line is never
 * rescanned for validation.  Lines end at "\n", "\r\n" or a lone "\r" (what
 * Python's text mode does).  A raw line starting with a space or a tab is an
 * edge line, any other non-blank line a node line; like PipeDream, which
 * strips the whole text first, the first non-blank line is always a node
 * line.  Node ids live in an open-addressing hash table (FNV-1a, linear
 * probing, load <= 1/2), so parsing is linear in the file size.  Strings are
 * appended to one arena addressed by offsets while parsing and turned into
 * pointers at the end.
 *
 * Numbers follow Python float() syntax (sign, digits with single "_"
 * between digits, optional fraction and exponent, surrounding white space;
 * no hex).  They are converted exactly with the classic fast path (integer
 * mantissa < 2^53 times or divided by an exact power of ten <= 1e22, one
 * correctly rounded IEEE operation); anything else goes through strtod under
 * a per-thread "C" LC_NUMERIC locale, which is correctly rounded in glibc.
 * Values must be finite and non-negative: "nan", "inf" and negative numbers,
 * which Python would accept, are rejected because no later stage can give
 * them a meaning; so is a number of more than MAX_NUMBER_CHARS characters.
 *
 * Thread-safety: no global state; uselocale() only changes the calling
 * thread's locale and is restored before returning. */
#include "profile.h"

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME_SNIP 240 /* bytes of the file name kept in messages */
#define TEXT_SNIP 60  /* bytes of offending text quoted in messages */
#define MAX_NUMBER_CHARS 1000

/* The public struct is the first member, so a hpgo_graph_t * from this file
 * can be converted back to graph_impl *. */
typedef struct graph_impl {
    hpgo_graph_t pub;
    char *arena;
} graph_impl;

typedef struct pnode {
    size_t id_off, id_len, desc_off;
    uint64_t hash;
} pnode;

typedef struct parser {
    char name[NAME_SNIP + 16]; /* sanitised display name */
    hpgo_err_t *err;
    hpgo_node_t *nodes;
    pnode *pn;
    size_t n_nodes, cap_nodes;
    uint64_t *tab; /* (hash >> 32) << 32 | (node index + 1); 0 = empty slot */
    size_t tab_cap;
    int32_t *esrc, *edst;
    long *eline;
    size_t n_edges, cap_edges;
    char *arena;
    size_t arena_len, arena_cap;
    locale_t cloc; /* created on first slow-path number */
} parser;

/* ---------------------------------------------------------------- text helpers */

/* Length of the valid UTF-8 sequence at s (n bytes available), 0 if invalid.
 * Rejects overlong forms, surrogates and code points above U+10FFFF, like
 * Python's strict decoder. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        if (c == 0xE0 && s[1] < 0xA0)
            return 0; /* overlong */
        if (c == 0xED && s[1] >= 0xA0)
            return 0; /* surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90)
            return 0;
        if (c == 0xF4 && s[1] >= 0x90)
            return 0;
        return 4;
    }
    return 0;
}

void hpgo_snip(char *dst, size_t cap, const char *src, size_t len)
{
    size_t o = 0, i = 0;
    const unsigned char *s = (const unsigned char *)src;
    while (i < len) {
        size_t k = utf8_len(s + i, len - i);
        int esc = k == 0 || s[i] < 0x20 || s[i] == 0x7F;
        size_t need = esc ? 4 : k;
        if (o + need + 4 > cap) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        if (esc) {
            snprintf(dst + o, 5, "\\x%02X", s[i]);
            o += 4;
            i += 1;
        } else {
            memcpy(dst + o, s + i, k);
            o += k;
            i += k;
        }
    }
    dst[o] = '\0';
}

/* Width in bytes of a white-space character (Python str.isspace, without the
 * control characters the reader rejects anyway) at s[0..n), else 0. */
static size_t space_at(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n')
        return 1;
    if (c == 0xC2 && n >= 2 && (s[1] == 0x85 || s[1] == 0xA0))
        return 2;
    if (n >= 3) {
        if (c == 0xE1 && s[1] == 0x9A && s[2] == 0x80)
            return 3;
        if (c == 0xE2 && s[1] == 0x80 &&
            ((s[2] >= 0x80 && s[2] <= 0x8A) || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF))
            return 3;
        if (c == 0xE2 && s[1] == 0x81 && s[2] == 0x9F)
            return 3;
        if (c == 0xE3 && s[1] == 0x80 && s[2] == 0x80)
            return 3;
    }
    return 0;
}

/* Width of a white-space character ending at s[n-1], else 0. */
static size_t space_before(const unsigned char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        if ((s[n - k] & 0xC0) == 0x80)
            continue; /* a continuation byte: the character starts before it */
        return space_at(s + n - k, k) == k ? k : 0;
    }
    return 0;
}

static void strip(const char **p, size_t *len)
{
    const unsigned char *s = (const unsigned char *)*p;
    size_t n = *len, k;
    while (n > 0 && (k = space_at(s, n)) > 0) {
        s += k;
        n -= k;
    }
    while (n > 0 && (k = space_before(s, n)) > 0)
        n -= k;
    *p = (const char *)s;
    *len = n;
}

/* Python str.split(sep) for a short separator: up to max tokens are stored,
 * the total count is returned. */
typedef struct tok {
    const char *s;
    size_t n;
} tok;

static size_t split(const char *s, size_t len, const char *sep, size_t seplen, tok *out,
                    size_t max)
{
    size_t count = 0, start = 0, i = 0;
    while (i + seplen <= len) {
        const char *hit = memchr(s + i, sep[0], len - seplen + 1 - i);
        if (!hit)
            break;
        i = (size_t)(hit - s);
        if (memcmp(hit, sep, seplen) == 0) {
            if (count < max)
                out[count] = (tok){s + start, i - start};
            count++;
            i += seplen;
            start = i;
        } else {
            i++;
        }
    }
    if (count < max)
        out[count] = (tok){s + start, len - start};
    return count + 1;
}

/* ---------------------------------------------------------------- errors */

static int perr(parser *p, int code, long line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static int perr(parser *p, int code, long line, const char *fmt, ...)
{
    char body[HPGO_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    return hpgo_err_set(p->err, code, line, "%s:%ld: %s", p->name, line, body);
}

static int nomem(parser *p)
{
    return hpgo_err_set(p->err, HPGO_E_NOMEM, 0, "%s: out of memory while reading the profile",
                        p->name);
}

/* ---------------------------------------------------------------- numbers */

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int lower_eq(const char *s, size_t n, const char *word)
{
    size_t w = strlen(word);
    if (n != w)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != word[i])
            return 0;
    }
    return 1;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Python float() of s[0..len).  Returns 0 and *out, 1 for bad syntax,
 * HPGO_E_NOMEM if the C locale cannot be created. */
static int parse_float(parser *p, const char *s, size_t len, double *out)
{
    strip(&s, &len);
    if (len == 0 || len > MAX_NUMBER_CHARS)
        return 1;
    size_t i = 0;
    int neg = 0;
    if (s[0] == '+' || s[0] == '-') {
        neg = s[0] == '-';
        i = 1;
    }
    if (lower_eq(s + i, len - i, "inf") || lower_eq(s + i, len - i, "infinity")) {
        *out = neg ? -HUGE_VAL : HUGE_VAL;
        return 0;
    }
    if (lower_eq(s + i, len - i, "nan")) {
        *out = NAN;
        return 0;
    }
    char clean[MAX_NUMBER_CHARS + 1];
    size_t c = 0;
    uint64_t mant = 0;
    int sig = 0, exact = 1, ndigits = 0, seen_dot = 0;
    long dexp = 0;
    if (neg)
        clean[c++] = '-';
    for (; i < len; i++) {
        char ch = s[i];
        if (is_digit(ch)) {
            ndigits++;
            clean[c++] = ch;
            if (mant == 0 && ch == '0') {
                if (seen_dot)
                    dexp--;
                continue;
            }
            if (sig < 19) {
                mant = mant * 10 + (uint64_t)(ch - '0');
                sig++;
                if (seen_dot)
                    dexp--;
            } else {
                exact = 0;
            }
        } else if (ch == '_') {
            if (i == 0 || !is_digit(s[i - 1]) || i + 1 >= len || !is_digit(s[i + 1]))
                return 1;
        } else if (ch == '.' && !seen_dot) {
            seen_dot = 1;
            clean[c++] = '.';
        } else {
            break;
        }
    }
    if (ndigits == 0)
        return 1;
    if (i < len) {
        if (s[i] != 'e' && s[i] != 'E')
            return 1;
        clean[c++] = 'e';
        i++;
        int eneg = 0;
        if (i < len && (s[i] == '+' || s[i] == '-')) {
            eneg = s[i] == '-';
            clean[c++] = s[i];
            i++;
        }
        int edigits = 0;
        long e = 0;
        for (; i < len; i++) {
            char ch = s[i];
            if (is_digit(ch)) {
                edigits++;
                clean[c++] = ch;
                if (e < 100000)
                    e = e * 10 + (ch - '0');
            } else if (ch == '_') {
                if (!is_digit(s[i - 1]) || i + 1 >= len || !is_digit(s[i + 1]))
                    return 1;
            } else {
                return 1;
            }
        }
        if (edigits == 0)
            return 1;
        dexp += eneg ? -e : e;
    }
    clean[c] = '\0';
    if (exact && mant <= ((uint64_t)1 << 53) && dexp >= -22 && dexp <= 22) {
        double v = (double)mant;
        v = dexp >= 0 ? v * POW10[dexp] : v / POW10[-dexp];
        *out = neg ? -v : v;
        return 0;
    }
    if (mant == 0 && exact) {
        *out = neg ? -0.0 : 0.0;
        return 0;
    }
    if (p->cloc == (locale_t)0) {
        p->cloc = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
        if (p->cloc == (locale_t)0)
            return HPGO_E_NOMEM;
    }
    locale_t old = uselocale(p->cloc);
    *out = strtod(clean, NULL);
    uselocale(old);
    return 0;
}

/* One value of a META item: number, finite, >= 0. */
static int parse_value(parser *p, long line, const char *what, const char *s, size_t n,
                       double *out)
{
    char q[TEXT_SNIP + 8];
    int rc = parse_float(p, s, n, out);
    if (rc == HPGO_E_NOMEM)
        return nomem(p);
    if (rc == 0 && !isnan(*out) && !isinf(*out) && *out >= 0)
        return HPGO_OK;
    strip(&s, &n);
    hpgo_snip(q, sizeof q, s, n);
    if (rc != 0 && n > MAX_NUMBER_CHARS)
        return perr(p, HPGO_E_PARSE, line,
                    "%s value '%s' has %zu characters, more than the limit of %d for a number",
                    what, q, n, MAX_NUMBER_CHARS);
    if (rc != 0)
        return perr(p, HPGO_E_PARSE, line, "%s value '%s' is not a number", what, q);
    if (isnan(*out))
        return perr(p, HPGO_E_PARSE, line, "%s value '%s' is NaN (not accepted)", what, q);
    if (isinf(*out))
        return perr(p, HPGO_E_PARSE, line, "%s value '%s' is infinite (not accepted)", what, q);
    if (*out < 0)
        return perr(p, HPGO_E_PARSE, line, "%s value '%s' is negative (not accepted)", what, q);
    return HPGO_OK;
}

/* Python int() of a stage id, as int64. */
static int parse_int64(const char *s, size_t n, int64_t *out)
{
    strip(&s, &n);
    size_t i = 0;
    int neg = 0;
    if (n > 0 && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i >= n)
        return -1;
    uint64_t v = 0;
    for (; i < n; i++) {
        if (s[i] == '_') {
            if (i == 0 || !is_digit(s[i - 1]) || i + 1 >= n || !is_digit(s[i + 1]))
                return -1;
            continue;
        }
        if (!is_digit(s[i]))
            return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

/* ---------------------------------------------------------------- storage */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ULL;
    h ^= h >> 32;
    return h;
}

static int arena_put(parser *p, const char *s, size_t n, size_t *off)
{
    if (p->arena_len + n + 1 > p->arena_cap) {
        size_t cap = p->arena_cap ? p->arena_cap : 65536;
        while (cap < p->arena_len + n + 1)
            cap *= 2;
        char *q = realloc(p->arena, cap);
        if (!q)
            return -1;
        p->arena = q;
        p->arena_cap = cap;
    }
    *off = p->arena_len;
    memcpy(p->arena + p->arena_len, s, n);
    p->arena[p->arena_len + n] = '\0';
    p->arena_len += n + 1;
    return 0;
}

/* Slot of id in the table: either the slot holding it or the empty slot
 * where it would go.  The upper hash bits stored in the slot settle most
 * mismatches without touching the node records. */
static size_t find_slot(const parser *p, const char *id, size_t n, uint64_t h)
{
    size_t mask = p->tab_cap - 1, i = (size_t)h & mask;
    uint64_t hi = h >> 32;
    for (;;) {
        uint64_t v = p->tab[i];
        if (v == 0)
            return i;
        if ((v >> 32) == hi) {
            const pnode *q = &p->pn[(uint32_t)v - 1];
            if (q->id_len == n && memcmp(p->arena + q->id_off, id, n) == 0)
                return i;
        }
        i = (i + 1) & mask;
    }
}

static int rehash(parser *p)
{
    size_t cap = p->tab_cap ? p->tab_cap * 2 : 1024;
    uint64_t *t = calloc(cap, sizeof *t);
    if (!t)
        return -1;
    free(p->tab);
    p->tab = t;
    p->tab_cap = cap;
    for (size_t k = 0; k < p->n_nodes; k++) {
        uint64_t h = p->pn[k].hash;
        size_t i = (size_t)h & (cap - 1);
        while (t[i] != 0)
            i = (i + 1) & (cap - 1);
        t[i] = (h >> 32) << 32 | (uint64_t)(k + 1);
    }
    return 0;
}

static int lookup(const parser *p, const char *id, size_t n)
{
    if (p->tab_cap == 0)
        return -1;
    size_t slot = find_slot(p, id, n, hash_bytes(id, n));
    return (int)(uint32_t)p->tab[slot] - 1;
}

/* ---------------------------------------------------------------- lines */

static int node_line(parser *p, long line, const char *s, size_t n)
{
    char q[TEXT_SNIP + 8];
    tok f[4];
    size_t nf = split(s, n, " -- ", 4, f, 4);
    if (nf < 3 || nf > 4) {
        hpgo_snip(q, sizeof q, s, n);
        return perr(p, HPGO_E_PARSE, line,
                    "node line has %zu field%s separated by ' -- ', expected 3 or 4 "
                    "(ID -- DESC -- META [-- stage_id=N]; a DESC may not contain ' -- '): '%s'",
                    nf, nf == 1 ? "" : "s", q);
    }
    if (p->n_nodes >= (size_t)HPGO_MAX_NODES)
        return perr(p, HPGO_E_LIMIT, line, "more than %d node lines (limit HPGO_MAX_NODES)",
                    HPGO_MAX_NODES);
    tok items[4];
    size_t ni = split(f[2].s, f[2].n, ", ", 2, items, 4);
    if (ni != 4) {
        hpgo_snip(q, sizeof q, f[2].s, f[2].n);
        return perr(p, HPGO_E_PARSE, line,
                    "META has %zu item%s separated by ', ', expected 4 (forward_compute_time, "
                    "backward_compute_time, activation_size, parameter_size): '%s'",
                    ni, ni == 1 ? "" : "s", q);
    }
    static const char *const what[4] = {"forward_compute_time", "backward_compute_time",
                                        "activation_size", "parameter_size"};
    double v[4];
    for (int k = 0; k < 4; k++) {
        const char *eq = memchr(items[k].s, '=', items[k].n);
        if (!eq) {
            hpgo_snip(q, sizeof q, items[k].s, items[k].n);
            return perr(p, HPGO_E_PARSE, line, "META item %d ('%s') is not key=value", k + 1, q);
        }
        const char *val = eq + 1;
        size_t vn = items[k].n - (size_t)(val - items[k].s);
        if (k == 2 && memchr(val, '[', vn)) {
            /* "[a; b; ...]": the sum, left to right from 0 */
            const char *ls = val;
            size_t ln = vn;
            strip(&ls, &ln);
            while (ln > 0 && ls[0] == '[') {
                ls++;
                ln--;
            }
            while (ln > 0 && ls[ln - 1] == ']')
                ln--;
            double sum = 0.0;
            size_t start = 0;
            for (size_t i = 0; i <= ln; i++) {
                if (i < ln && ls[i] != ';')
                    continue;
                double x;
                int rc = parse_value(p, line, "activation_size list", ls + start, i - start, &x);
                if (rc != HPGO_OK)
                    return rc;
                sum += x;
                start = i + 1;
            }
            v[k] = sum;
        } else {
            int rc = parse_value(p, line, what[k], val, vn, &v[k]);
            if (rc != HPGO_OK)
                return rc;
        }
    }
    int64_t stage = -1;
    if (nf == 4) {
        const char *eq = memchr(f[3].s, '=', f[3].n);
        if (!eq || parse_int64(eq + 1, f[3].n - (size_t)(eq + 1 - f[3].s), &stage) < 0) {
            hpgo_snip(q, sizeof q, f[3].s, f[3].n);
            return perr(p, HPGO_E_PARSE, line, "4th field '%s' is not stage_id=<int>", q);
        }
    }
    if (f[0].n == 0)
        return perr(p, HPGO_E_PARSE, line, "empty node id");
    if (2 * (p->n_nodes + 1) > p->tab_cap && rehash(p) < 0)
        return nomem(p);
    uint64_t h = hash_bytes(f[0].s, f[0].n);
    size_t slot = find_slot(p, f[0].s, f[0].n, h);
    if (p->tab[slot] != 0) {
        hpgo_snip(q, sizeof q, f[0].s, f[0].n);
        return perr(p, HPGO_E_PARSE, line, "duplicate node id '%s' (first declared on line %ld)",
                    q, p->nodes[(uint32_t)p->tab[slot] - 1].line);
    }
    if (p->n_nodes == p->cap_nodes) {
        size_t cap = p->cap_nodes ? 2 * p->cap_nodes : 1024;
        hpgo_node_t *a = realloc(p->nodes, cap * sizeof *a);
        if (a)
            p->nodes = a;
        pnode *b = a ? realloc(p->pn, cap * sizeof *b) : NULL;
        if (!b)
            return nomem(p);
        p->pn = b;
        p->cap_nodes = cap;
    }
    pnode *pn = &p->pn[p->n_nodes];
    if (arena_put(p, f[0].s, f[0].n, &pn->id_off) < 0 ||
        arena_put(p, f[1].s, f[1].n, &pn->desc_off) < 0)
        return nomem(p);
    pn->id_len = f[0].n;
    pn->hash = h;
    hpgo_node_t *nd = &p->nodes[p->n_nodes];
    nd->id = nd->desc = NULL;
    nd->fwd_ms = v[0];
    nd->bwd_ms = v[1];
    nd->act_bytes = v[2];
    nd->par_bytes = v[3];
    nd->stage_id = stage;
    nd->line = line;
    p->tab[slot] = (h >> 32) << 32 | (uint64_t)(p->n_nodes + 1);
    p->n_nodes++;
    return HPGO_OK;
}

static int edge_line(parser *p, long line, const char *s, size_t n)
{
    char q[TEXT_SNIP + 8];
    tok f[2];
    size_t nf = split(s, n, " -- ", 4, f, 2);
    if (nf != 2) {
        hpgo_snip(q, sizeof q, s, n);
        return perr(p, HPGO_E_PARSE, line,
                    "edge line (it starts with white space) has %zu field%s separated by ' -- ', "
                    "expected 2 (SRC -- DST): '%s'",
                    nf, nf == 1 ? "" : "s", q);
    }
    int32_t ends[2];
    for (int k = 0; k < 2; k++) {
        ends[k] = lookup(p, f[k].s, f[k].n);
        if (ends[k] < 0) {
            hpgo_snip(q, sizeof q, f[k].s, f[k].n);
            return perr(p, HPGO_E_PARSE, line,
                        "edge %s '%s' is not a node declared on an earlier line",
                        k == 0 ? "source" : "destination", q);
        }
    }
    if (p->n_edges >= (size_t)HPGO_MAX_EDGES)
        return perr(p, HPGO_E_LIMIT, line, "more than %d edge lines (limit HPGO_MAX_EDGES)",
                    HPGO_MAX_EDGES);
    if (p->n_edges == p->cap_edges) {
        size_t cap = p->cap_edges ? 2 * p->cap_edges : 1024;
        int32_t *a = realloc(p->esrc, cap * sizeof *a);
        if (a)
            p->esrc = a;
        int32_t *b = a ? realloc(p->edst, cap * sizeof *b) : NULL;
        if (b)
            p->edst = b;
        long *c = b ? realloc(p->eline, cap * sizeof *c) : NULL;
        if (!c)
            return nomem(p);
        p->eline = c;
        p->cap_edges = cap;
    }
    p->esrc[p->n_edges] = ends[0];
    p->edst[p->n_edges] = ends[1];
    p->eline[p->n_edges] = line;
    p->n_edges++;
    return HPGO_OK;
}

/* Scan and dispatch every line. */
static int parse_lines(parser *p, const char *buf, size_t len)
{
    const unsigned char *u = (const unsigned char *)buf;
    size_t pos = 0;
    long line = 0;
    int seen = 0;
    if (len >= 3 && u[0] == 0xEF && u[1] == 0xBB && u[2] == 0xBF)
        pos = 3; /* a UTF-8 byte order mark is skipped */
    while (pos < len) {
        line++;
        size_t start = pos, i = pos;
        while (i < len) {
            unsigned char c = u[i];
            if (c >= 0x20 && c < 0x7F) {
                i++;
                continue;
            }
            if (c == '\n' || c == '\r')
                break;
            if (c == '\t' || c == '\v' || c == '\f') {
                i++;
                continue;
            }
            if (c >= 0x80) {
                size_t k = utf8_len(u + i, len - i);
                if (k == 0)
                    return perr(p, HPGO_E_PARSE, line,
                                "invalid UTF-8 byte 0x%02X at column %zu (profiles are UTF-8 "
                                "text)",
                                c, i - start + 1);
                i += k;
                continue;
            }
            if (c == 0)
                return perr(p, HPGO_E_PARSE, line,
                            "NUL byte at column %zu (binary data, not a profile)",
                            i - start + 1);
            return perr(p, HPGO_E_PARSE, line,
                        "control character 0x%02X at column %zu (binary data, not a profile)", c,
                        i - start + 1);
        }
        size_t end = i;
        if (i < len)
            i += (u[i] == '\r' && i + 1 < len && u[i + 1] == '\n') ? 2 : 1;
        pos = i;
        const char *s = buf + start;
        size_t n = end - start;
        int indented = n > 0 && (s[0] == ' ' || s[0] == '\t');
        strip(&s, &n);
        if (n == 0)
            continue;
        int rc = (indented && seen) ? edge_line(p, line, s, n) : node_line(p, line, s, n);
        if (rc != HPGO_OK)
            return rc;
        seen = 1;
    }
    if (p->n_nodes == 0)
        return perr(p, HPGO_E_PARSE, 1, "empty profile (no node lines)");
    return HPGO_OK;
}

static void parser_free(parser *p)
{
    free(p->nodes);
    free(p->pn);
    free(p->tab);
    free(p->esrc);
    free(p->edst);
    free(p->eline);
    free(p->arena);
    if (p->cloc != (locale_t)0)
        freelocale(p->cloc);
}

int hpgo_graph_parse(const char *buf, size_t len, const char *name, hpgo_graph_t **out,
                     hpgo_err_t *err)
{
    parser p;
    memset(&p, 0, sizeof p);
    p.err = err;
    p.cloc = (locale_t)0;
    hpgo_err_clear(err);
    if (!name)
        name = "<profile>";
    hpgo_snip(p.name, NAME_SNIP, name, strlen(name));
    if (!out || (!buf && len > 0))
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "hpgo_graph_parse: NULL argument");
    *out = NULL;
    if (len > HPGO_MAX_FILE_BYTES)
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "%s: profile is %zu bytes, more than the limit of %zu bytes", p.name,
                            len, HPGO_MAX_FILE_BYTES);
    int rc = parse_lines(&p, buf, len);
    if (rc != HPGO_OK) {
        parser_free(&p);
        return rc;
    }
    graph_impl *gi = calloc(1, sizeof *gi);
    char *gname = gi ? malloc(strlen(p.name) + 1) : NULL;
    if (!gi || !gname) {
        free(gi);
        parser_free(&p);
        return nomem(&p);
    }
    strcpy(gname, p.name);
    hpgo_graph_t *g = &gi->pub;
    g->name = gname;
    g->n_nodes = (int32_t)p.n_nodes;
    g->nodes = p.nodes;
    g->n_edges = (int32_t)p.n_edges;
    g->edge_src = p.esrc;
    g->edge_dst = p.edst;
    g->edge_line = p.eline;
    gi->arena = p.arena;
    for (size_t k = 0; k < p.n_nodes; k++) {
        g->nodes[k].id = p.arena + p.pn[k].id_off;
        g->nodes[k].desc = p.arena + p.pn[k].desc_off;
    }
    p.nodes = NULL;
    p.esrc = p.edst = NULL;
    p.eline = NULL;
    p.arena = NULL;
    parser_free(&p);
    *out = g;
    return HPGO_OK;
}

int hpgo_graph_load(const char *path, hpgo_graph_t **out, hpgo_err_t *err)
{
    char name[NAME_SNIP + 16], ebuf[128];
    hpgo_err_clear(err);
    if (!path || !out)
        return hpgo_err_set(err, HPGO_E_INVALID, 0, "hpgo_graph_load: NULL argument");
    *out = NULL;
    hpgo_snip(name, NAME_SNIP, path, strlen(path));
    /* O_NONBLOCK: opening a FIFO without a writer would wait for one forever
     * (cleared below, so a pipe with a writer is read normally) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        if (strerror_r(e, ebuf, sizeof ebuf) != 0)
            snprintf(ebuf, sizeof ebuf, "errno %d", e);
        if (e == ENOENT || e == ENOTDIR)
            return hpgo_err_set(err, HPGO_E_NOTFOUND, 0, "%s: no such file", name);
        return hpgo_err_set(err, HPGO_E_IO, 0, "%s: cannot open: %s", name, ebuf);
    }
    struct stat stb;
    if (fstat(fd, &stb) != 0 || S_ISDIR(stb.st_mode)) {
        close(fd);
        return hpgo_err_set(err, HPGO_E_IO, 0, "%s: is a directory, not a profile file", name);
    }
    if (S_ISCHR(stb.st_mode) || S_ISBLK(stb.st_mode)) {
        close(fd);
        return hpgo_err_set(err, HPGO_E_INVALID, 0,
                            "%s: is a device, not a profile file (a regular file or a pipe)",
                            name);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        close(fd);
        return hpgo_err_set(err, HPGO_E_IO, 0, "%s: cannot read", name);
    }
    if (S_ISREG(stb.st_mode) && (uintmax_t)stb.st_size > (uintmax_t)HPGO_MAX_FILE_BYTES) {
        close(fd);
        return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                            "%s: profile is %jd bytes, more than the limit of %zu bytes", name,
                            (intmax_t)stb.st_size, HPGO_MAX_FILE_BYTES);
    }
    size_t cap = S_ISREG(stb.st_mode) ? (size_t)stb.st_size + 1 : 65536, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return hpgo_err_set(err, HPGO_E_NOMEM, 0, "%s: out of memory reading the file", name);
    }
    for (;;) {
        if (len == cap) {
            /* a pipe, or a file that grew: past the limit by one byte is enough */
            if (len > HPGO_MAX_FILE_BYTES) {
                free(buf);
                close(fd);
                return hpgo_err_set(err, HPGO_E_LIMIT, 0,
                                    "%s: profile is more than the limit of %zu bytes", name,
                                    HPGO_MAX_FILE_BYTES);
            }
            size_t ncap = cap * 2 > HPGO_MAX_FILE_BYTES + 1 ? HPGO_MAX_FILE_BYTES + 1 : cap * 2;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                close(fd);
                return hpgo_err_set(err, HPGO_E_NOMEM, 0, "%s: out of memory reading the file",
                                    name);
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            if (strerror_r(e, ebuf, sizeof ebuf) != 0)
                snprintf(ebuf, sizeof ebuf, "errno %d", e);
            free(buf);
            close(fd);
            return hpgo_err_set(err, HPGO_E_IO, 0, "%s: read error: %s", name, ebuf);
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    int rc = hpgo_graph_parse(buf, len, path, out, err);
    free(buf);
    return rc;
}

void hpgo_graph_free(hpgo_graph_t *g)
{
    if (!g)
        return;
    graph_impl *gi = (graph_impl *)g;
    free(g->name);
    free(g->nodes);
    free(g->edge_src);
    free(g->edge_dst);
    free(g->edge_line);
    free(gi->arena);
    free(gi);
}
