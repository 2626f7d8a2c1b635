/* TEMPORARY: until the importer lands. */
#include "profile.h"
int hpgo_graph_load(const char *path, hpgo_graph_t **out, hpgo_err_t *err)
{ (void)path; *out = NULL; return hpgo_err_set(err, HPGO_E_INTERNAL, 0, "importer missing"); }
int hpgo_states_build(const hpgo_graph_t *g, hpgo_states_t **out, hpgo_err_t *err)
{ (void)g; *out = NULL; return hpgo_err_set(err, HPGO_E_INTERNAL, 0, "importer missing"); }
void hpgo_states_free(hpgo_states_t *s) { (void)s; }
void hpgo_graph_free(hpgo_graph_t *g) { (void)g; }
