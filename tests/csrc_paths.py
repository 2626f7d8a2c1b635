"""Where the C core's files are: each room of csrc/ (base/, step/, search/,
the wings hpgo/, distir/, dynpipe/, hap/, and the glue in module/) is an
include directory, and a file is found by its name alone (names are unique
across rooms; tests build pieces of the core straight from these paths)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"


def src(name):
    """The one file of csrc/ called `name` (e.g. "work.c", "timeline.h")."""
    found = sorted(CSRC.rglob(name))
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


def rooms():
    return sorted(p for p in CSRC.iterdir() if p.is_dir())


def core_sources():
    """Every .c of the core (not the CPython glue)."""
    return sorted(str(p) for r in rooms() if r.name != "module" for p in r.glob("*.c"))


def include_flags():
    return ["-I" + str(r) for r in rooms()]
