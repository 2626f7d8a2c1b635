/* profile_glue.c - CPython glue of the profile reader (placeholder). */
#include "glue.h"

int glue_profile_init(PyObject *module)
{
    (void)module;
    return 0;
}
