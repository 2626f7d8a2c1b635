"""A slow, independent Python reading of spec/hpgo-compat.md sections 2-3.

Test oracle only: it cross-checks the C importer (and lets planner tests be
driven from states built outside the C code).  Written for clarity, not speed.
"""


def read_graph(path):
    nodes, order, out_e, in_e = {}, [], {}, {}
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if raw[0] in " \t":
            src, dst = line.split(" -- ")
            out_e[src].append(dst)
            in_e[dst].append(src)
            continue
        parts = line.split(" -- ")
        nid, desc, meta = parts[0], parts[1], parts[2]
        vals = [kv.split("=", 1)[1] for kv in meta.split(", ")]
        act = vals[2]
        if "[" in act:
            act = sum(float(x) for x in act.strip("[]").split("; "))
        nodes[nid] = (desc, float(vals[0]), float(vals[1]), float(act), float(vals[3]))
        order.append(nid)
        out_e[nid], in_e[nid] = [], []
    return nodes, order, out_e, in_e


def _remove(nid, nodes, order, out_e, in_e):
    del nodes[nid]
    order.remove(nid)
    for o in out_e.pop(nid):
        in_e[o].remove(nid)
    for i in in_e.pop(nid):
        out_e[i].remove(nid)


def build_states(path):
    nodes, order, out_e, in_e = read_graph(path)
    for nid in [n for n in order if not in_e[n]]:
        if nodes[nid][0].startswith("Input"):
            _remove(nid, nodes, order, out_e, in_e)
    for nid in [n for n in order if not out_e[n]]:
        if nodes[nid][0].startswith("__getitem__"):
            _remove(nid, nodes, order, out_e, in_e)
    pos = {n: i for i, n in enumerate(order)}

    def closure(start, edges):
        seen, stack = set(), list(edges[start])
        while stack:
            x = stack.pop()
            if x not in seen:
                seen.add(x)
                stack.extend(edges[x])
        return seen

    anc = {n: closure(n, in_e) for n in order}
    des = {n: closure(n, out_e) for n in order}
    memo = {}

    def augment(A):
        key = tuple(sorted(A))
        if key not in memo:
            X = set()
            for a in A:
                for p in anc[a]:
                    if any(o not in anc[a] and o != a for o in out_e[p]):
                        X.add(p)
            memo[key] = sorted(X, key=pos.get) + list(A)
        return memo[key]

    def reduce(S):
        out = []
        for x in S:
            if x not in out and not any(y in des[x] for y in S):
                out.append(x)
        return out

    def nxt(A):
        AA = augment(A)
        res = []
        for x in AA:
            for n in out_e[x]:
                if n in A or any(d in AA for d in des[n]):
                    continue
                res.append(reduce([n if y == x else y for y in AA]))
        return res

    sources = [n for n in order if not in_e[n]]
    A0 = [sources[0]]
    dag_nodes, dag_edges, label, stored = [], {}, {}, {}
    mapping = {tuple(sorted(A0)): "antichain_0"}
    label["antichain_0"] = nodes[A0[0]][0]
    stored["antichain_0"] = augment(A0)
    counter, queue, expanded = 0, [A0], set()

    def add_node(v):
        if v not in dag_edges:
            dag_edges[v] = []
            dag_nodes.append(v)

    while queue:
        A = queue.pop(0)
        key = tuple(sorted(A))
        if key in expanded:
            continue
        expanded.add(key)
        for B in nxt(A):
            bkey = tuple(sorted(B))
            if bkey not in mapping:
                counter += 1
                name = "antichain_%d" % counter
                mapping[bkey] = name
                label[name] = nodes[B[0]][0]
                stored[name] = augment(B)
            add_node(mapping[key])
            add_node(mapping[bkey])
            dag_edges[mapping[key]].append(mapping[bkey])
            queue.append(B)
    if not dag_nodes:
        return None
    # depth-first topological order, labels sorted (stable)
    out, visited = [], set()

    def dfs(v):
        visited.add(v)
        for c in sorted(dag_edges[v], key=lambda u: label[u]):
            if c not in visited:
                dfs(c)
        out.insert(0, v)

    for v in sorted(dag_nodes, key=lambda u: label[u]):
        if v not in visited:
            dfs(v)
    index = {v: i for i, v in enumerate(out)}
    dag_in = {v: [] for v in out}
    for v in out:
        for c in dag_edges[v]:
            dag_in[c].append(v)
    ct, act, par, oa, preds, labels = [], [], [], [], [], []
    for v in out:
        X = stored[v]
        cover = set(X)
        for x in X:
            cover |= anc[x]
        c = a = p = 0.0
        for n in order:
            if n in cover:
                d = nodes[n]
                c += (d[1] + d[2]) / 1000
                a += d[3]
                p += d[4]
        o = 0.0
        for x in X:
            o += nodes[x][3]
        seen, stack = set(), list(dag_in[v])
        while stack:
            u = stack.pop()
            if u not in seen:
                seen.add(u)
                stack.extend(dag_in[u])
        ct.append(c)
        act.append(a)
        par.append(p)
        oa.append(o)
        preds.append(sorted(index[u] for u in seen))
        labels.append(label[v])
    return dict(ct=ct, act=act, par=par, oa=oa, preds=preds, labels=labels)
