#!/usr/bin/env python3
"""Finds import cycles between the top-level modules of each crate (docs/ARCHITECTURE.md).

A crate's modules depend downward only: `crate::a` naming something of `crate::b` while `b`
names something of `a` (directly or round a longer loop) is a cycle, and neither can be read,
tested or moved without the other. The unit is a top-level module: `src/x.rs`, or the folder
`src/x/` as one (what a folder module's files say to each other is its own business). An edge
x -> y is any `crate::y` (or `super::y` from `x.rs` or `x/mod.rs`) in x's files, or a name the crate
root re-exports from y (`pub use y::Name`, then `crate::Name`). Test code (`#[cfg(test)]` to the
end of a file, `tests/`) is not read.

Usage: module-cycles.py [CRATE_DIR ...]   (default: every crates/*/)
       module-cycles.py --self-test        (a crate with a cycle is caught, one without passes)
Exit status 1 when a cycle is found.
"""

import os
import re
import sys
import tempfile

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(text):
    """Comments, strings and test modules out: only code names modules."""
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text


def top_items(group):
    """The first path segment of each item of a `{a::b, c, d::{e, f}}` group (braces stripped)."""
    items, depth, cur = [], 0, ""
    for ch in group:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    out = []
    for it in items:
        m = re.match(r"\s*(" + IDENT + ")", it)
        if m:
            out.append(m.group(1))
    return out


def group_after(text, start):
    """The text of the brace group opening at `start` (without its braces)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return ""


def named(text, prefix):
    """Every first segment after `prefix::` in `text` (`prefix::{a, b}` gives a and b)."""
    found = []
    for m in re.finditer(r"\b" + prefix + r"::", text):
        rest = m.end()
        if rest < len(text) and text[rest] == "{":
            found += top_items(group_after(text, rest))
        else:
            n = re.match(IDENT, text[rest:])
            if n:
                found.append(n.group(0))
    return found


def crate_graph(crate_dir):
    """{module: set(modules it names)} for one crate's top-level modules."""
    src = os.path.join(crate_dir, "src")
    if not os.path.isdir(src):
        return {}
    roots = [f for f in ("lib.rs", "main.rs") if os.path.isfile(os.path.join(src, f))]
    modules = {}
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry.endswith(".rs") and entry not in roots:
            modules[entry[:-3]] = [path]
        elif os.path.isdir(path):
            files = []
            for d, _, fs in os.walk(path):
                files += [os.path.join(d, f) for f in fs if f.endswith(".rs")]
            if files:
                modules[entry] = sorted(files)
    # Names the crate root hands on from a module: `pub use m::{A, B}` / `pub use m::A`.
    reexported = {}
    for r in roots:
        text = strip(open(os.path.join(src, r), encoding="utf-8").read())
        for m in re.finditer(r"pub\s+use\s+(?:self::|crate::)?(" + IDENT + r")::", text):
            module = m.group(1)
            if module not in modules:
                continue
            rest = m.end()
            if rest < len(text) and text[rest] == "{":
                names = top_items(group_after(text, rest))
            else:
                n = re.match(IDENT, text[rest:])
                names = [n.group(0)] if n else []
            for name in names:
                reexported[name] = module
    graph = {}
    for module, files in modules.items():
        deps = set()
        for f in files:
            text = strip(open(f, encoding="utf-8").read())
            heads = named(text, "crate")
            # `super::` from a top-level module's own file (`x.rs`, `x/mod.rs`) is the root.
            top = os.path.dirname(f) == src or (
                os.path.basename(f) == "mod.rs" and os.path.dirname(os.path.dirname(f)) == src
            )
            if top:
                heads += named(text, "super")
            for h in heads:
                target = h if h in modules else reexported.get(h)
                if target and target != module:
                    deps.add(target)
        graph[module] = deps
    return graph


def cycles(graph):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def report(crate_dirs):
    found = 0
    for c in crate_dirs:
        graph = crate_graph(c)
        for comp in cycles(graph):
            found += 1
            ties = [
                f"{a} -> {b}" for a in comp for b in sorted(graph[a]) if b in comp
            ]
            print(f"module cycle in {c}: {', '.join(comp)} ({'; '.join(ties)})")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "src")
        os.makedirs(os.path.join(src, "c"))
        files = {
            "lib.rs": "mod a; mod b; mod c; mod d;\npub use b::Thing;\n",
            "a.rs": "use crate::{c::Deep, Thing};\n// crate::b in a comment is no edge\n",
            "b.rs": "pub struct Thing;\nfn f() -> super::a::X { todo!() }\n",
            "c/mod.rs": "pub mod inner;\nuse super::d as _;\n",
            "d.rs": "pub struct D;\n",
            "c/inner.rs": "pub struct Deep;\nuse super::Other; // inside c: not the root\n",
        }
        for name, text in files.items():
            with open(os.path.join(src, name), "w", encoding="utf-8") as f:
                f.write(text)
        graph = crate_graph(d)
        assert graph == {"a": {"b", "c"}, "b": {"a"}, "c": {"d"}, "d": set()}, graph
        assert cycles(graph) == [["a", "b"]], cycles(graph)
        # Without b's word about a: no cycle.
        with open(os.path.join(src, "b.rs"), "w", encoding="utf-8") as f:
            f.write("pub struct Thing;\n#[cfg(test)]\nmod tests { use crate::a; }\n")
        assert cycles(crate_graph(d)) == [], crate_graph(d)
    print("module-cycles self-test: a cycle is caught, its absence passes")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--self-test"]:
        self_test()
        sys.exit(0)
    root = os.path.relpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    dirs = args or sorted(
        os.path.join(root, "crates", c)
        for c in os.listdir(os.path.join(root, "crates"))
        if os.path.isdir(os.path.join(root, "crates", c))
    )
    sys.exit(1 if report(dirs) else 0)
