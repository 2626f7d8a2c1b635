"""Wrong uses of hpgo's API that mypy must reject (tests/test_typing.py
counts one error per marked line)."""
import hpgo
from hpgo.plan import Plan

m = hpgo.model_from_torch_graph("graph.txt", 1, 32)
d = hpgo.devices_from_seps([8, 16])
hpgo.dp_speedup(m, d)  # E: arguments swapped
m.gbs = 64  # E: read-only property
n: str = m.num_layers  # E: int is not str
hpgo.AsyncOrchestrate(m, d, 4)  # E: threads is keyword-only
x: int = hpgo.AsyncOrchestrate(m, d).py_orchestrate()[0]  # E: the speedup is a float
Plan.load(42)  # E: a path, not an int
p: Plan = Plan.from_hpgo((1.0, []))
p.speedup = 2.0  # E: frozen dataclass
