"""Files hpgo reads and writes (issue 16, items 3, 4 and 6).

Writes are atomic: every writer goes through hpgo._files.atomic_write (a
temporary file in the same directory, then os.replace), so an error while
producing or writing the data leaves the old file intact and no temporary
file behind.  Reads refuse devices, never wait for a FIFO writer, are
capped, and turn malformed bytes into a ValueError naming the file."""
import os
import stat
import time

import pytest

import hpgo
from hpgo import _files, zoo
from hpgo.dynpipe import read_layer_profile
from hpgo.graphfile import read_graph, read_json, write_graph

P = "profiles/transformer36-v100/graph.txt"
OLD = "the old contents\n"


@pytest.fixture(scope="module")
def plan():
    return hpgo.best_plan(P, 1, 128, [8, 16])


@pytest.fixture(scope="module")
def sim():
    return hpgo.simulate_pipeline([hpgo.Stage(1e-3, 2e-3)] * 2, 4)


def _writers(plan, sim):
    from hpgo.dot import write_dot
    from hpgo.graphfile import chain
    prof = chain([("Input", 0, 0, 1, 0), ("a", 1, 2, 3, 4)])
    return {
        "plan.save": lambda p: plan.save(p),
        "sweep.to_csv": lambda p: hpgo.sweep(P, 1, [128], [8, 16]).to_csv(p),
        "to_chrome_trace": lambda p: sim.to_chrome_trace(p),
        "write_dot": lambda p: write_dot(P, p),
        "write_graph": lambda p: write_graph(p, prof),
    }


def _leftovers(d, name):
    return [f for f in os.listdir(d) if f != name]


@pytest.mark.parametrize("which", ["plan.save", "sweep.to_csv", "to_chrome_trace", "write_dot",
                                   "write_graph"])
def test_a_failing_write_leaves_the_old_file(tmp_path, monkeypatch, plan, sim, which):
    target = tmp_path / "out.file"
    target.write_text(OLD)
    os.chmod(target, 0o640)
    write = _writers(plan, sim)[which]

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_files.os, "fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        write(target)
    assert target.read_text() == OLD
    assert _leftovers(tmp_path, "out.file") == []
    monkeypatch.undo()
    write(target)  # and a good write replaces it, keeping its permissions
    assert target.read_text() != OLD
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert _leftovers(tmp_path, "out.file") == []


def test_saving_a_plan_that_cannot_be_serialised_keeps_the_file(tmp_path, plan):
    """The bug of issue 16: a bytes profile path made to_json fail after
    open() had truncated the file."""
    import dataclasses
    target = tmp_path / "plan.json"
    plan.save(target)
    before = target.read_text()
    bad = dataclasses.replace(plan, profile=b"graph.txt")
    with pytest.raises(TypeError):
        bad.save(target)
    assert target.read_text() == before
    assert hpgo.Plan.load(target) == plan


def test_new_files_get_the_usual_permissions(tmp_path, plan):
    old = os.umask(0o022)
    try:
        plan.save(tmp_path / "p.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "p.json").st_mode) == 0o644


def test_a_write_into_a_missing_folder_names_the_file(tmp_path, plan):
    """The error names the file asked for, not the temporary one beside it."""
    target = tmp_path / "no-such-folder" / "p.json"
    for write in (lambda: plan.save(target), lambda: _files.atomic_write(target, "x"),
                  lambda: hpgo.ParallelPlan(global_batch=8, dp=8).deepspeed_json(target)):
        with pytest.raises(FileNotFoundError) as e:
            write()
        assert e.value.filename == str(target)
    assert not (tmp_path / "no-such-folder").exists()


READERS = {
    "Plan.load": lambda p: hpgo.Plan.load(p),
    "device file": lambda p: zoo.get_device(str(p)),
    "read_layer_profile": lambda p: read_layer_profile(p),
    "read_graph": lambda p: read_graph(p),
    "read_json": lambda p: read_json(p),
}


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("which", sorted(READERS))
def test_readers_refuse_devices(which):
    t = time.perf_counter()
    with pytest.raises(ValueError, match="/dev/zero: is a device"):
        READERS[which]("/dev/zero")
    assert time.perf_counter() - t < 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_readers_do_not_wait_for_a_fifo_writer(tmp_path):
    """In a child with a timeout, so that a reader waiting for a writer
    fails the test instead of hanging it."""
    from robust_child import run_child
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    child = run_child(f"""
        import hpgo
        from hpgo import zoo
        from hpgo.dynpipe import read_layer_profile
        from hpgo.graphfile import read_graph, read_json
        readers = {{'Plan.load': hpgo.Plan.load, 'device': zoo.get_device,
                    'layers': read_layer_profile, 'read_graph': read_graph,
                    'read_json': read_json}}
        for name, f in readers.items():
            try:  # an empty file: an error naming it (read_graph: an empty profile)
                f({str(fifo)!r})
                result[name] = 'returned'
            except ValueError as e:
                result[name] = str(e)
        """, timeout=60)
    assert child.returncode == 0, child.describe()
    for name in ("Plan.load", "device", "layers", "read_json"):
        assert str(fifo) in child.result[name], child.result
    assert child.result["read_graph"] == "returned"


@pytest.mark.parametrize("which", ["Plan.load", "device file", "read_json"])
def test_deep_json_is_a_value_error_naming_the_file(tmp_path, which):
    f = tmp_path / "deep.json"
    f.write_text("[" * 200000 + "]" * 200000)
    with pytest.raises(ValueError, match="deep.json") as e:
        READERS[which](f)
    assert not isinstance(e.value, RecursionError)


@pytest.mark.parametrize("which", sorted(READERS))
def test_non_utf8_is_a_value_error_naming_the_file(tmp_path, which):
    f = tmp_path / "latin1.txt"
    f.write_bytes(b'{"name": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"latin1.txt:1: not UTF-8"):
        READERS[which](f)


def test_oversized_csv_field_is_a_value_error(tmp_path):
    f = tmp_path / "layers.csv"
    f.write_text("fwd_ms,bwd_ms,out_comm_s_at_1GBps,layer\n1,2,0.1,\"" + "x" * 200000 + "\"\n")
    with pytest.raises(ValueError, match=r"layers.csv:\d+: malformed CSV"):
        read_layer_profile(f)


def test_read_cap(tmp_path):
    f = tmp_path / "big"
    f.write_bytes(b"x" * 101)
    assert _files.read_bytes(f, limit=101) == b"x" * 101
    with pytest.raises(ValueError, match="more than the limit of 100 bytes"):
        _files.read_bytes(f, limit=100)
    assert _files.MAX_FILE_BYTES == 1 << 30  # the C reader's HPGO_MAX_FILE_BYTES
