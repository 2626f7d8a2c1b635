"""Build script for the hpgo C extension (``hpgo._core``).

Every ``.c`` file under ``csrc/`` goes into one extension, built with
``-pthread``: the pure C11 core in its rooms (``base/``, ``step/``,
``search/`` and the wings ``hpgo/``, ``distir/``, ``dynpipe/``, ``hap/``)
and the CPython glue in ``csrc/module/``.  Each room is an include
directory, so a file includes another room's header by its name.

Environment switches (read at build time):

* ``HPGO_SANITIZE=address,undefined`` (or ``thread``): build with those
  sanitizers; the interpreter then needs the runtime preloaded, see
  docs/errors-and-limits.md (or .ci/sanitizers.sh).
* ``HPGO_DEBUG=1``: ``-O0 -g`` instead of ``-O2``.
* ``HPGO_WERROR=1``: turn warnings into errors (CI does this).

The wheel also ships the profiles named in ``hpgo/examples/__init__.py``
(``SHIPPED``, and the GPU kernel and step profiles of ``KERNELS`` and ``STEPS``), copied from ``profiles/`` into ``hpgo/examples/`` at build
time so that the repository keeps one copy of each.
"""
import ast
import glob
import os
import shutil

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


#: the C core's rooms, bottom floor first (csrc/README.md)
ROOMS = ("base", "step", "search", "hpgo", "distir", "dynpipe", "hap", "module")


def _sources():
    return [f for room in ROOMS for f in sorted(glob.glob(os.path.join("csrc", room, "*.c")))]


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


def _shipped(name):
    with open(os.path.join(HERE, "hpgo", "examples", "__init__.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"hpgo/examples/__init__.py has no {name} tuple")


def _shipped_profiles():
    return _shipped("SHIPPED")


class BuildPyWithProfiles(build_py):
    """build_py that also copies the shipped profiles into hpgo/examples/."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads profiles/ in place
            return
        for name in _shipped_profiles():
            src = os.path.join(HERE, "profiles", name)
            dst = os.path.join(self.build_lib, "hpgo", "examples", name)
            os.makedirs(dst, exist_ok=True)
            for fn in ("graph.txt", "profile.json"):
                shutil.copyfile(os.path.join(src, fn), os.path.join(dst, fn))
        for fn in _shipped("KERNELS") + _shipped("STEPS"):
            shutil.copyfile(os.path.join(HERE, "profiles", fn),
                            os.path.join(self.build_lib, "hpgo", "examples", fn))


cflags, ldflags = _flags()

setup(
    cmdclass={"build_py": BuildPyWithProfiles},
    ext_modules=[
        Extension(
            "hpgo._core",
            sources=_sources(),
            include_dirs=[os.path.join("csrc", room) for room in ROOMS],
            depends=sorted(glob.glob(os.path.join("csrc", "*.h"))
                           + glob.glob(os.path.join("csrc", "module", "*.h"))),
            extra_compile_args=cflags,
            extra_link_args=ldflags,
            define_macros=[("_POSIX_C_SOURCE", "200809L")],
        )
    ],
)
