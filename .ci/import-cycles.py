#!/usr/bin/env python3
"""Import cycles among the files of checkpoint-runtime/src (the `bin` tree
aside: a binary is a leaf that only imports): every `use`
path and every inline `crate::`/`super::`/`self::` path (comments and tests
excluded) becomes an edge to the file that defines the named item, following
`pub use` re-exports; then strongly connected components of size > 1 are
reported."""
import os, re, sys
ROOT = sys.argv[1] if len(sys.argv) > 1 else 'checkpoint-runtime/src'
files = {}
for d, _, fs in os.walk(ROOT):
    if os.path.relpath(d, ROOT).split(os.sep)[0] == 'bin': continue
    for f in fs:
        if not f.endswith('.rs'): continue
        p = os.path.join(d, f)
        rel = os.path.relpath(p, ROOT)[:-3].split(os.sep)
        if rel[-1] == 'mod': rel = rel[:-1]
        if rel == ['lib']: rel = []
        files[tuple(rel)] = p
TEST_FILES = {k for k in files if k and k[-1] in ('tests', 'conformance')}
def strip(src):
    src = re.sub(r'//[^\n]*', '', src)
    src = re.sub(r'pub\(in [^)]*\)', 'pub', src)  # visibility, not a dependency
    # drop #[cfg(test)] items (mod blocks / single items)
    out, i = [], 0
    while True:
        m = re.search(r'#\[cfg\(test\)\]', src[i:])
        if not m: out.append(src[i:]); break
        s = i + m.start(); out.append(src[i:s])
        j = s + len(m.group(0))
        # skip to end of the item: ';' at depth 0 or matching '}'
        depth = 0
        while j < len(src):
            c = src[j]
            if c == '{': depth += 1
            elif c == '}':
                depth -= 1
                if depth == 0: j += 1; break
            elif c == ';' and depth == 0: j += 1; break
            j += 1
        i = j
    return ''.join(out)
def flatten(tree):
    tree = tree.strip()
    m = re.match(r'^(.*?)\{(.*)\}$', tree, re.S)
    if not m: return [tree]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ''
    for c in inner:
        if c == ',' and depth == 0: parts.append(cur); cur = ''; continue
        if c == '{': depth += 1
        if c == '}': depth -= 1
        cur += c
    parts.append(cur)
    out = []
    for p in parts:
        p = p.strip()
        if not p: continue
        for q in flatten(p): out.append(prefix + q)
    return out
src_of = {k: strip(open(p).read()) for k, p in files.items()}
def defines(mod, name):
    s = src_of.get(mod, '')
    return re.search(r'\b(struct|enum|fn|trait|type|const|static|macro_rules!)\s+' + re.escape(name) + r'\b', s) is not None
def reexports(mod):
    s = src_of.get(mod, '')
    out = {}
    for m in re.finditer(r'pub(?:\([^)]*\))?\s+use\s+([^;]+);', s):
        for path in flatten(m.group(1)):
            path = re.sub(r'\s+', '', path)
            name = path.split(' as ')[-1].split('::')[-1]
            out[name] = path
    return out
def absolute(mod, path):
    segs = path.split('::')
    if segs[0] == 'crate': base, segs = [], segs[1:]
    elif segs[0] == 'self': base, segs = list(mod), segs[1:]
    elif segs[0] == 'super':
        base = list(mod)
        while segs and segs[0] == 'super': base = base[:-1]; segs = segs[1:]
    elif tuple(list(mod) + [segs[0]]) in files: base = list(mod)
    else: return None
    return base + segs
def resolve(mod, path, depth=0):
    full = absolute(mod, path)
    if full is None: return None
    # longest module prefix
    for n in range(len(full), -1, -1):
        if tuple(full[:n]) in files:
            target = tuple(full[:n]); rest = full[n:]
            break
    else: return None
    if rest and rest[0] not in ('*', 'self') and depth < 5:
        name = rest[0]
        if not defines(target, name):
            re_ = reexports(target)
            if name in re_:
                r = resolve(target, re_[name], depth + 1)
                if r: return r
    return target
edges = {k: set() for k in files}
for mod, s in src_of.items():
    if mod in TEST_FILES: continue
    paths = []
    for m in re.finditer(r'\buse\s+([^;]+);', s):
        paths += [re.sub(r'\s+', '', re.sub(r'\s+as\s+\w+\s*$', '', p)) for p in flatten(m.group(1))]
    s = re.sub(r'\buse\s+[^;]+;', '', s)
    paths += re.findall(r'\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z_0-9]*)+)', s)
    paths += [p for p in re.findall(r'(?<![:\w])([a-z_][a-z_0-9]*(?:::[A-Za-z_][A-Za-z_0-9]*)+)', s)
              if tuple(list(mod) + [p.split('::')[0]]) in files]
    for p in paths:
        t = resolve(mod, p)
        if t and t != mod and t not in TEST_FILES:
            edges[mod].add(t)
# Tarjan
index, low, stack, on, sccs, c = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def strong(v):
    index[v] = low[v] = c[0]; c[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index: strong(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        sccs.append(comp)
for v in edges:
    if v not in index: strong(v)
cyc = [s for s in sccs if len(s) > 1]
if '-v' in sys.argv:
    for k in sorted(edges):
        print('::'.join(k), '->', ', '.join(sorted('::'.join(t) for t in edges[k])))
print(f'{len(files)} files, {sum(len(e) for e in edges.values())} edges, {len(cyc)} cycles')
for s in cyc:
    print('cycle:', ' <-> '.join(sorted('::'.join(m) for m in s)))
sys.exit(1 if cyc else 0)
