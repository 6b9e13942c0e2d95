"""The functions a load runs, read from callgrind's dumps, for the linker's layout of the
release binary (`bench/run layout`, crates/switchyard-gateway/build.rs).

A dump lists each function that ran once per part, as `fn=(id) name` the first time and
`fn=(id)` after, under the object that holds it (`ob=`); cost lines follow, and the line after
a `calls=` line is the inclusive cost of that call, not the function's own. Names must be the
binary's own (`valgrind --demangle=no`), since the linker matches them to its symbols; the
names callgrind makes up (`(below main)`, `0x...` for code without a symbol) are left out, and
a recursive call's cycle mark (`name'2`) is taken off.
"""

import collections
import re

_NAMED = re.compile(r"^(c?ob|c?fn)=\((\d+)\)(?: (.*))?$")
_CYCLE = re.compile(r"'\d+$")
_COST = re.compile(r"^(?:[+-]?\d+|\*)((?: \d+)+)$")


def functions_run(lines, binary):
    """{symbol: own instructions} of the functions in the object whose path ends in `/binary`
    that ran in the dump whose text is `lines`."""
    objects, functions = {}, {}
    own = collections.Counter()
    current_object = current = None
    in_call = False
    for line in lines:
        line = line.rstrip("\n")
        named = _NAMED.match(line)
        if named:
            kind, key, name = named.groups()
            table = objects if kind.endswith("ob") else functions
            if name is not None:
                table[key] = _CYCLE.sub("", name)
            if kind == "ob":
                current_object = objects.get(key)
            elif kind == "fn":
                current = functions.get(key)
                if (current is not None and current_object is not None and current_object.endswith("/" + binary)
                        and not current.startswith(("(", "0x"))):
                    own[current] += 0
                else:
                    current = None
            continue
        if line.startswith("calls="):
            in_call = True
            continue
        cost = _COST.match(line)
        if cost:
            if in_call:
                in_call = False
            elif current is not None:
                own[current] += int(cost.group(1).split()[0])
    return own


def ordered(costs):
    """Symbols by own instructions, the most first (the code run per chunk, then per request),
    and by name among equals, so that one set of dumps gives one file."""
    return [name for name, _ in sorted(costs.items(), key=lambda item: (-item[1], item[0]))]


def placement(symbols, table):
    """How the binary lays out `symbols`, from `nm -S` lines `table`: (found, bytes, pages
    touched, fewest pages they could fill). Pages are 4 KiB."""
    where = {}
    for line in table:
        fields = line.split()
        if len(fields) == 4:
            where[fields[3]] = (int(fields[0], 16), int(fields[1], 16))
    found = [where[name] for name in symbols if name in where]
    pages = set()
    for start, size in found:
        pages.update(range(start // 4096, (start + max(size, 1) - 1) // 4096 + 1))
    total = sum(size for _, size in found)
    return len(found), total, len(pages), -(-total // 4096)
