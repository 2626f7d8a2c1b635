/* sim_glue.c - CPython glue of the schedule / cluster simulator (sim.h).
 * Placeholder until the simulator lands: adds nothing. */
#include "glue.h"

int glue_sim_init(PyObject *module)
{
    (void)module;
    return 0;
}
