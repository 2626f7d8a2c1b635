"""Profiles that ship with hpgo, found by name from any directory.

A few of the profiles hpgo generated itself (``profiles/`` of a checkout,
``python profiles/generate.py``) are copied into the wheel as package data,
so the quick start works from an installed wheel::

    import hpgo
    from hpgo import examples
    path = examples.path("transformer36")           # .../transformer36-v100/graph.txt
    hpgo.best_plan(path, examples.batch_size("transformer36"), 128, [8, 16])

On the command line: ``hpgo plan --example transformer36 --gbs 128 --seps 8,16``.

A name is a folder name (``"resnet50-v100"``) or a model name, which means
its V100 profile (``"resnet50"``, ``"bert48"``, ``"bert-48"``); case, ``-``
and ``_`` do not matter.  In a checkout (or an editable install) every
folder of ``profiles/`` can be named, not only the shipped ones.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from .. import _files

__all__ = ["SHIPPED", "KERNELS", "STEPS", "names", "folder", "path", "batch_size", "metadata",
           "kernels", "steps"]

#: Folders of ``profiles/`` the wheel ships (setup.py copies them into
#: hpgo/examples/ at build time; keep it small: about 300 kB in all).
SHIPPED = (
    "transformer36-v100",
    "resnet50-v100",
    "bert-48-v100",
    "xlnet-36-v100",
    "gnmt-16-v100",
    "vgg19-v100",
    "amoebanet-36-v100",
    "gpt2-xl-h100",
)

#: GPU kernel profiles of ``profiles/`` the wheel ships (hpgo profile kernels).
KERNELS = ("h100-sxm5-kernels.json", "h200-sxm-kernels.json")
# training steps of Llama-style models timed on one GPU (hpgo profile step)
STEPS = ("h100-sxm5-steps.json", "h100-sxm5-expandable-steps.json",
         "h100-sxm5-torchtitan-steps.json", "h200-sxm-torchtitan-steps.json")

_HERE = Path(__file__).resolve().parent
_CHECKOUT = _HERE.parents[1] / "profiles"


def _roots() -> List[Path]:
    roots = [_HERE]
    # a checkout (or an editable install): hpgo/ beside profiles/ and pyproject.toml
    if _CHECKOUT.is_dir() and (_CHECKOUT.parent / "pyproject.toml").is_file():
        roots.append(_CHECKOUT)
    return roots


def _available() -> List[str]:
    seen: List[str] = []
    for root in _roots():
        for d in sorted(root.iterdir()):
            if (d / "graph.txt").is_file() and d.name not in seen:
                seen.append(d.name)
    return seen


def names() -> List[str]:
    """Folder names of the profiles that can be named here (the shipped
    ones; every folder of ``profiles/`` in a checkout)."""
    return _available()


def _key(s: str) -> str:
    return s.lower().replace("-", "").replace("_", "")


def folder(name: str) -> Path:
    """The folder (``graph.txt`` + ``profile.json``) of profile ``name``;
    ``ValueError`` listing the names when there is none."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    avail = _available()
    want = _key(name)
    match = [n for n in avail if _key(n) == want] or [
        n for n in avail if _key(n) == want + "v100"]
    if not match:
        raise ValueError(f"no example profile {name!r}; available: {', '.join(avail)}")
    for root in _roots():
        d = root / match[0]
        if (d / "graph.txt").is_file():
            return d
    raise ValueError(f"no example profile {name!r}")  # pragma: no cover - listed above


def path(name: str) -> Path:
    """Absolute path of the ``graph.txt`` of profile ``name``."""
    return folder(name) / "graph.txt"


def metadata(name: str) -> dict:
    """The ``meta`` record of the profile's ``profile.json`` (model,
    device, dtype, batch_size, method), or {} when it has none."""
    j = folder(name) / "profile.json"
    if not j.is_file():
        return {}
    d = _files.load_json(j, "profile.json")
    meta = d.get("meta", {}) if isinstance(d, dict) else {}
    return meta if isinstance(meta, dict) else {}


def batch_size(name: str) -> Optional[int]:
    """The batch size the profile was made with (its ``pbs``), or None."""
    bs = metadata(name).get("batch_size")
    return bs if isinstance(bs, int) and not isinstance(bs, bool) else None


def kernels(name: str = "h100-sxm5") -> Path:
    """Path of the GPU kernel profile ``name`` (``profiles/NAME-kernels.json``,
    measured by ``hpgo profile kernels``), for :mod:`hpgo.calibrate`."""
    return _measured(name, "kernels", "kernel profile")


def steps(name: str = "h100-sxm5") -> Path:
    """Path of the step profile ``name`` (``profiles/NAME-steps.json``: whole
    training steps of Llama-style models timed on one GPU, eager and
    compiled, by ``hpgo profile step``)."""
    return _measured(name, "steps", "step profile")


def _measured(name: str, kind: str, what: str) -> Path:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    plain = bool(name) and not set(name) & set("/\\") and ".." not in name   # no paths
    for root in _roots() if plain else ():
        p = root / f"{name}-{kind}.json"
        if p.is_file():
            return p
    have = sorted({q.name[: -len(f"-{kind}.json")] for root in _roots()
                   for q in root.glob(f"*-{kind}.json")})
    raise ValueError(f"no {what} {name!r}; available: {', '.join(have) or 'none'}")
