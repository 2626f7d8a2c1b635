/* plan_glue.c - CPython glue of the HPGO-compatible planner (placeholder). */
#include "glue.h"

int glue_plan_init(PyObject *module)
{
    (void)module;
    return 0;
}
