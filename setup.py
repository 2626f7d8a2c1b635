"""Build script for the hpgo C extension (``hpgo._core``).

Every ``csrc/*.c`` file (the pure C11 core) and every ``csrc/module/*.c``
file (the CPython glue) goes into one extension, built with ``-pthread``.

Environment switches (read at build time):

* ``HPGO_SANITIZE=address,undefined`` (or ``thread``): build with those
  sanitizers; the interpreter then needs the runtime preloaded, see README.
* ``HPGO_DEBUG=1``: ``-O0 -g`` instead of ``-O2``.
* ``HPGO_WERROR=1``: turn warnings into errors (CI does this).
"""
import glob
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _sources():
    core = sorted(glob.glob(os.path.join("csrc", "*.c")))
    glue = sorted(glob.glob(os.path.join("csrc", "module", "*.c")))
    return core + glue


def _flags():
    cflags = ["-std=c11", "-pthread", "-Wall", "-Wextra", "-Wshadow",
              "-Wno-missing-field-initializers", "-fno-strict-aliasing"]
    ldflags = ["-pthread"]
    if os.environ.get("HPGO_DEBUG") == "1":
        cflags += ["-O0", "-g"]
    else:
        cflags += ["-O2"]
    if os.environ.get("HPGO_WERROR") == "1":
        cflags += ["-Werror"]
    san = os.environ.get("HPGO_SANITIZE", "").strip()
    if san:
        cflags += ["-fsanitize=" + san, "-fno-omit-frame-pointer", "-g"]
        ldflags += ["-fsanitize=" + san]
    return cflags, ldflags


cflags, ldflags = _flags()

setup(
    ext_modules=[
        Extension(
            "hpgo._core",
            sources=_sources(),
            include_dirs=["csrc"],
            depends=sorted(glob.glob(os.path.join("csrc", "*.h"))
                           + glob.glob(os.path.join("csrc", "module", "*.h"))),
            extra_compile_args=cflags,
            extra_link_args=ldflags,
            define_macros=[("_POSIX_C_SOURCE", "200809L")],
        )
    ],
)
