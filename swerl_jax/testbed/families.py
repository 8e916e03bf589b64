"""The testbed's bug families: each a pure function of a `random.Random` returning one `Bug` (see its docstring).

`swerl_jax.testbed.tasks` does the rest: names the package and modules, adds unrelated helpers and distractor
modules, runs the calls on both versions (expected values, the issue's "got"/"want") and writes the record.
Templates mark the bug with `@0`, `@1`, which `_pair` fills with the buggy and the fixed text.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

NOUNS = ("user", "order", "item", "task", "page", "node", "file", "event", "token", "job", "row", "packet", "invoice",
         "ticket", "message", "record", "sensor", "reading", "sample", "account", "payment", "booking", "visit",
         "track", "song", "photo", "comment", "post", "entry", "shipment", "parcel", "device", "metric", "score",
         "lesson", "student", "course", "recipe", "bucket", "player", "station", "route", "product", "review",
         "channel", "sprint", "build", "release", "asset", "tenant", "invite", "coupon", "flight", "member")
_ints = lambda rng, k, lo=1, hi=90: rng.sample(range(lo, hi), k)  # k distinct ints
SEQS = ("items", "values", "entries", "seq", "data")
FLAGS = ("active", "enabled", "visible", "paid", "ready", "valid", "published", "archived", "pinned")
WORDS = ("alpha", "beta", "gamma", "delta", "red", "blue", "oak", "pine", "north", "south", "kilo", "echo", "lima")


@dataclasses.dataclass(frozen=True)
class Bug:
    """One bug: the top-level blocks of the module the fix edits as (buggy, fixed) pairs (equal when unchanged),
    `header` (constants, imports) above them, `calls` showing the bug (expressions over the module `m`: the
    FAIL_TO_PASS tests), the issue's `title` and `detail` (the intended behaviour), `support`: (module stem, source)
    of unchanged package modules the code imports, `shown`: how the issue quotes calls[0] (default: without `m.`),
    `keep`: expressions over `m` equal before and after the fix (extra PASS_TO_PASS tests)."""

    blocks: tuple[tuple[str, str], ...]
    calls: tuple[str, ...]
    title: str
    detail: str = ""
    header: str = ""
    support: tuple[tuple[str, str], ...] = ()
    shown: str = ""
    keep: tuple[str, ...] = ()


def plural(noun: str) -> str:
    """English plural of a regular noun ("entry" -> "entries", "box" -> "boxes")."""
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


def _pair(template: str, *edits: tuple[str, str]) -> tuple[str, str]:
    """(buggy, fixed) texts of `template`, with @k replaced by the k-th edit's buggy or fixed side."""
    bug, fix = template, template
    for k, (b, f) in enumerate(edits):
        bug, fix = bug.replace(f"@{k}", b), fix.replace(f"@{k}", f)
    return bug, fix


def _fn(name: str, params: str, doc: str, body: str, *edits: tuple[str, str]) -> tuple[str, str]:
    return _pair(f'def {name}({params}):\n    """{doc}"""\n{body}', *edits)


def _noun(rng: random.Random) -> tuple[str, str, str]:
    n = rng.choice(NOUNS)  # (noun, its plural, a sequence parameter name)
    return n, plural(n), rng.choice((*SEQS, plural(n)))


def off_by_one(rng: random.Random) -> Bug:
    """A slice end or a range bound one short (`end - 1`, `range(1, count)`)."""
    n, ns, seq = _noun(rng)
    k, data, tag = rng.randint(2, 4), _ints(rng, 7), rng.choice(WORDS)
    fn, params, doc, body, edit, calls, title = rng.choice((
        (rng.choice((f"{n}_window", f"take_{ns}", f"slice_{ns}")), f"{seq}, start, size",
         f"The `size` {ns} starting at index `start`.", f"    end = start + size\n    return {seq}[start:@0]\n",
         ("end - 1", "end"), (f"({data}, 1, {k})", f"({data}, 0, {k + 1})"), f"returns one {n} too few"),
        (rng.choice((f"{n}_labels", f"number_{ns}", f"{n}_ids")), "count",
         f'Labels "{tag}-1" .. "{tag}-<count>", both ends included.',
         f'    return [f"{tag}-{{i}}" for i in range(1, @0)]\n', ("count", "count + 1"), (f"({k + 2})",),
         "misses the last label")))
    return Bug((_fn(fn, params, doc, body, edit),), tuple(f"m.{fn}{c}" for c in calls), f"{fn} {title}")


def wrong_comparison(rng: random.Random) -> Bug:
    """`<` for `<=` (or `>` for `>=`, and back) at an inclusive/exclusive bound."""
    n, limit, other = rng.choice(NOUNS), rng.randint(3, 60), rng.randint(3, 60)
    fix, bug, word = rng.choice((("<=", "<", "at most"), (">=", ">", "at least"), ("<", "<=", "below"),
                                 (">", ">=", "above")))
    const, par, kind = rng.choice(("LIMIT", "THRESHOLD", "CUTOFF", "BOUND")), rng.choice(("limit", "bound")), \
        "inclusive" if "=" in fix else "exclusive"
    fn = rng.choice((f"{n}_allowed", f"is_valid_{n}", f"accepts_{n}", f"check_{n}"))
    block = _fn(fn, f"value, {par}={const}", f"True when `value` is {word} `{par}` ({kind}).",
                f"    return value @0 {par}\n", (bug, fix))
    return Bug((block,), (f"m.{fn}({limit})", f"m.{fn}({other}, {other})"),
               rng.choice((f"{fn} is wrong exactly at the {const.lower()}", f"Boundary bug in {fn}")),
               f"The bound is {kind}.", header=f"{const} = {limit}\n", keep=(f"m.{fn}({limit + 20})",))


def wrong_arithmetic(rng: random.Random) -> Bug:
    """The wrong arithmetic operator (`+` for `*`, `+` for `-`, ...)."""
    n, ns, _ = _noun(rng)
    fn, a, b, fix, bug, doc = rng.choice((
        (f"{n}_cost", "unit_price", "quantity", "*", "+", f"Total price of `quantity` {ns}."),
        (f"remaining_{ns}", "total", "used", "-", "+", f"How many {ns} are left once `used` are taken."),
        (f"{n}_area", "width", "height", "*", "-", "Area of a `width` x `height` rectangle."),
        (f"{n}_growth", "after", "before", "-", "*", "Change from `before` to `after`.")))
    out, (x, y) = rng.choice(("result", "value", "out", "amount")), sorted(_ints(rng, 2, 3, 40))
    block = _fn(fn, f"{a}, {b}", doc, f"    {out} = {a} @0 {b}\n    return {out}\n", (bug, fix))
    return Bug((block,), (f"m.{fn}({y}, {x})",), f"{fn} computes the wrong number", f"It should give: {doc}")


def inverted_condition(rng: random.Random) -> Bug:
    """A filter condition negated (`if not x.get(flag)`)."""
    n, ns, seq = _noun(rng)
    flag, (i, j) = rng.choice(FLAGS), _ints(rng, 2)
    fn = rng.choice((f"{flag}_{ns}", f"only_{flag}_{ns}", f"filter_{ns}"))
    body = rng.choice((f'    return [x for x in {seq} if @0x.get("{flag}")]\n',
                       f'    result = []\n    for {n} in {seq}:\n        if @0{n}["{flag}"]:\n'
                       f'            result.append({n})\n    return result\n'))
    block = _fn(fn, seq, f'Only the {ns} whose "{flag}" flag is set.', body, ("not ", ""))
    return Bug((block,), (f'm.{fn}([{{"id": {i}, "{flag}": True}}, {{"id": {j}, "{flag}": False}}])',),
               rng.choice((f"{fn} returns the wrong {ns}", f"{fn} keeps exactly the {ns} it should drop")),
               f'{ns.capitalize()} with "{flag}" set must be kept.')


def wrong_return(rng: random.Random) -> Bug:
    """The fall-through return value wrong (0 for -1, True for False)."""
    (n, _, seq), data, lim = _noun(rng), _ints(rng, 4), rng.choice(("limit", "cap"))
    fn, params, doc, body, edit, keep, title = rng.choice((
        (rng.choice((f"find_{n}", f"index_of_{n}", f"{n}_position")), f"{seq}, target",
         f"Index of `target` in `{seq}`, or -1 when it is absent.",
         f"    for i, x in enumerate({seq}):\n        if x == target:\n            return i\n    return @0\n",
         (rng.choice(("0", "None", f"len({seq})")), "-1"), data[2], f"does not report a missing {n}"),
        (rng.choice((f"any_large_{n}", f"has_big_{n}", f"{n}_exceeds")), f"{seq}, {lim}",
         f"True when some {n} is larger than `{lim}`.",
         f"    for x in {seq}:\n        if x > {lim}:\n            return True\n    return @0\n",
         ("True", "False"), 0, "is always True")))
    return Bug((_fn(fn, params, doc, body, edit),), (f"m.{fn}({data}, 95)",), f"{fn} {title}",
               keep=(f"m.{fn}({data}, {keep})",))


def missing_none_check(rng: random.Random) -> Bug:
    """No `if x is None` guard before using an optional argument."""
    n, ns, _ = _noun(rng)
    key, val = rng.choice(("timeout", "retries", "depth", "size")), rng.randint(2, 99)
    fn, params, doc, body, guard, call, keep, header = rng.choice((
        (f"get_{n}_setting", "config, name", "`name` from `config` (None: no config), else from DEFAULTS.",
         "    return config.get(name, DEFAULTS.get(name))\n", "        config = {}\n", f'(None, "{key}")',
         f'({{"{key}": 1}}, "{key}")', f'DEFAULTS = {{"{key}": {val}}}\n'),
        (rng.choice((f"{n}_slug", f"slugify_{n}")), "name", 'Lower-case, dash-joined `name`; None gives "".',
         '    return "-".join(name.lower().split())\n', '        return ""\n', "(None)", '("A b")', ""),
        (rng.choice((f"total_{n}_weight", f"sum_{ns}")), "weights", "Sum of `weights`; None counts as none.",
         "    return sum(weights)\n", "        return 0\n", "(None)", f"({_ints(rng, 3)})", "")))
    arg = params.split(",")[0]
    block = _fn(fn, params, doc, "@0" + body, ("", f"    if {arg} is None:\n{guard}"))
    return Bug((block,), (f"m.{fn}{call}",), f"{fn} crashes on None", f"`{arg}` may be None.", header=header,
               keep=(f"m.{fn}{keep}",))


def wrong_variable(rng: random.Random) -> Bug:
    """A sibling variable used in place of the right one (`bottom - left`, `x * x`)."""
    n, (x, y) = rng.choice(NOUNS), _ints(rng, 2, 0, 20)
    a, b, c, d = rng.choice((("left", "top", "right", "bottom"), ("x0", "y0", "x1", "y1")))
    (xs, u), (ys, v) = rng.choice(((("prices", "price"), ("counts", "count")), (("xs", "x"), ("ys", "y")),
                                   (("weights", "w"), ("scores", "s"))))
    fn, params, doc, body, edit, call = rng.choice((
        (rng.choice((f"{n}_size", f"{n}_extent")), f"{a}, {b}, {c}, {d}", f"(width, height) of the box ({a}, {b}) - "
         f"({c}, {d}).", f"    width = {c} - {a}\n    height = {d} - @0\n    return width, height\n", (a, b),
         f"({x}, {y}, {x + rng.randint(5, 9)}, {y + rng.randint(10, 19)})"),
        (rng.choice((f"weighted_{n}_total", f"{n}_dot")), f"{xs}, {ys}", f"Sum of {xs}[i] * {ys}[i].",
         f"    total = 0\n    for {u}, {v} in zip({xs}, {ys}):\n        total += {u} * @0\n    return total\n",
         (u, v), f"({_ints(rng, 3, 2, 9)}, {_ints(rng, 3, 10, 19)})")))
    return Bug((_fn(fn, params, doc, body, edit),), (f"m.{fn}{call}",), f"{fn} returns the wrong result")


def swapped_args(rng: random.Random) -> Bug:
    """A call site passing two arguments in the wrong order (the callee is right)."""
    (n, ns, _), top = _noun(rng), rng.randint(10, 50)
    callee, params, doc, body, caller, cparams, args, call = rng.choice((
        (f"share_of_{ns}", "part, whole", "`part` as a percentage of `whole`.", "round(100 * part / whole)",
         rng.choice((f"{n}_progress", f"{n}_done_percent")), "done, total", ("total, done", "done, total"),
         f"({rng.randint(1, 3)}, {rng.randint(4, 9)})"),
        (f"pad_{n}", "text, width", "`text` right-aligned in `width` columns.", "text.rjust(width)",
         rng.choice((f"{n}_cell", f"format_{n}_cell")), "value, width", ("width, str(value)", "str(value), width"),
         f"({rng.randint(1, 99)}, {rng.randint(4, 8)})"),
        (f"clamp_{n}", "value, low, high", "`value` limited to [low, high].", "max(low, min(value, high))",
         rng.choice((f"{n}_level", f"bounded_{n}")), "raw", (f"0, raw, {top}", f"raw, 0, {top}"),
         f"({top + rng.randint(5, 40)})")))
    helper = _fn(callee, params, doc, f"    return {body}\n")
    return Bug((helper, _pair(f"def {caller}({cparams}):\n    return {callee}(@0)\n", args)), (f"m.{caller}{call}",),
               rng.choice((f"{caller} gives nonsense", f"{caller} calls {callee} wrongly")))


def mutable_default(rng: random.Random) -> Bug:
    """A mutable default argument (`bag=[]`) shared between calls."""
    (n, ns, _), (a, b) = _noun(rng), rng.sample(WORDS, 2)
    bag, reg = rng.choice(("bag", "into", "target", "out")), rng.choice(("registry", "table", "index"))
    fn, params, doc, body, edits, args = rng.choice((
        (rng.choice((f"add_{n}", f"collect_{n}")), f"{n}, @0", f"Append `{n}` to `{bag}` (a new list when omitted).",
         f"@1    {bag}.append({n})\n    return {bag}\n",
         ((f"{bag}=[]", f"{bag}=None"), ("", f"    if {bag} is None:\n        {bag} = []\n")), (f'"{a}"', f'"{b}"')),
        (rng.choice((f"register_{n}", f"index_{n}")), "name, value, @0",
         f"Add name -> value to `{reg}` (a new dict when omitted).", f"@1    {reg}[name] = value\n    return {reg}\n",
         ((f"{reg}={{}}", f"{reg}=None"), ("", f"    if {reg} is None:\n        {reg} = {{}}\n")),
         (f'"{a}", 1', f'"{b}", 2'))))
    return Bug((_fn(fn, params, doc, body, *edits),), (f"(m.{fn}({args[0]}), m.{fn}({args[1]}))[-1]",),
               f"{fn} remembers earlier {ns}", shown=f"{fn}({args[0]}); {fn}({args[1]})")


def wrong_exception(rng: random.Random) -> Bug:
    """The wrong exception type caught (`except TypeError` around `int()`) or raised (ValueError for KeyError)."""
    n = rng.choice(NOUNS)
    store, word, d = rng.choice(("store", "table", "cache", "mapping")), rng.choice(WORDS), rng.randint(0, 9)
    fn, params, doc, body, wrong, right, call, keep = rng.choice((
        (rng.choice((f"parse_{n}_count", f"{n}_number")), f"text, default={d}",
         "int(text), or `default` when it is not a number.", "int(text)", ("TypeError", "KeyError", "OverflowError"),
         "ValueError", f'("{word}")', f'("{rng.randint(10, 99)}")'),
        (rng.choice((f"{n}_or_default", f"find_{n}")), f"{store}, key, default=None",
         f"{store}[key], or `default` when the key is absent.", f"{store}[key]", ("IndexError", "ValueError"),
         "KeyError", f'({{"a": 1}}, "{word}", {d})', '({"a": 1}, "a")'),
        (rng.choice((f"get_{n}", f"lookup_{n}")), f"{store}, key", f"The {n} under `key`; raises KeyError if absent.",
         None, ("ValueError", "RuntimeError", "TypeError"), "KeyError", f'({{"a": 1}}, "{word}")', '({"a": 1}, "a")')))
    body = (f"    try:\n        return {body}\n    except @0:\n        return default\n" if body else
            f"    if key not in {store}:\n        raise @0(key)\n    return {store}[key]\n")
    return Bug((_fn(fn, params, doc, body, (rng.choice(wrong), right)),), (f"m.{fn}{call}",),
               f"{fn} does not handle a bad {n} as documented", keep=(f"m.{fn}{keep}",))


def missing_return(rng: random.Random) -> Bug:
    """The final `return` missing: the function falls through to None."""
    n, ns, seq = _noun(rng)
    hi, lo = rng.randint(60, 90), rng.randint(20, 50)
    fn, params, doc, body, fix, call, keep = rng.choice((
        (rng.choice((f"positive_{n}_total", f"sum_positive_{ns}")), seq, f"Sum of the positive {ns}.",
         f"    total = 0\n    for x in {seq}:\n        if x > 0:\n            total += x\n", "    return total\n",
         f"({_ints(rng, 3)} + [-4])", ()),
        (rng.choice((f"{n}_bucket", f"rate_{n}", f"{n}_grade")), "score", f'"high" from {hi}, "medium" from {lo}, '
         'else "low".', f'    if score >= {hi}:\n        return "high"\n    if score >= {lo}:\n'
         '        return "medium"\n', '    return "low"\n', f"({lo - rng.randint(1, 9)})", (f"({hi})",))))
    return Bug((_fn(fn, params, doc, body + "@0", ("", fix)),), (f"m.{fn}{call}",), f"{fn} returns None",
               keep=tuple(f"m.{fn}{k}" for k in keep))


def wrong_default(rng: random.Random) -> Bug:
    """A wrong default parameter value (`sep=";"` for commas, `digits=0` for 2)."""
    n, ns, seq = _noun(rng)
    w = rng.sample(WORDS, 3)
    num = f"{rng.randint(100, 9999)}." + "".join(str(rng.randint(1, 4)) for _ in range(4))  # no carry
    fn, params, doc, body, edit, call, title = rng.choice((
        (rng.choice((f"split_{ns}", f"parse_{n}_list")), "text, sep=@0", "Parts of `text`, split on commas by default.",
         "[part.strip() for part in text.split(sep)]", (rng.choice(('";"', '" "', '"|"')), '","'),
         f'("{w[0]}, {w[1]},{w[2]}")', "does not split on commas"),
        (rng.choice((f"{n}_price", f"round_{n}")), "value, digits=@0", "`value` rounded to 2 decimals by default.",
         "round(value, digits)", (rng.choice(("0", "1", "3")), "2"), f"({num})",
         "rounds to the wrong precision"),
        (rng.choice((f"number_{ns}", f"enumerate_{ns}")), f"{seq}, start=@0", f"(number, {n}) pairs, from 1 on.",
         f"list(enumerate({seq}, start))", ("0", "1"), f"({w[:2]})", "starts counting at 0")))
    return Bug((_fn(fn, params, doc, f"    return {body}\n", edit),), (f"m.{fn}{call}",), f"{fn} {title}")


def format_order(rng: random.Random) -> Bug:
    """String formatting with the fields in the wrong order (`.format`, f-string or `%`)."""
    n, style = rng.choice(NOUNS), rng.randrange(3)
    (a, b), sep = rng.choice((("name", "count"), ("label", "total"), ("key", "value"), ("title", "year"))), \
        rng.choice((": ", " = ", " -> ", " | ", " x"))
    fn = rng.choice((f"{n}_line", f"{n}_label", f"format_{n}"))
    body = (f'"{{}}{sep}{{}}".format(@0)', 'f"{@0}"', f'"%s{sep}%s" % (@0)')[style]
    edit = (f"{b}, {a}", f"{a}, {b}") if style != 1 else (f"{b}}}{sep}{{{a}", f"{a}}}{sep}{{{b}")
    block = _fn(fn, f"{a}, {b}", f'One report line: "<{a}>{sep}<{b}>".', f"    return {body}\n", edit)
    return Bug((block,), (f'm.{fn}("{rng.choice(WORDS)}", {rng.randint(2, 99)})',),
               f"{fn} prints the fields in the wrong order")


def wrong_key(rng: random.Random) -> Bug:
    """A wrong dict key or attribute name (`["mail"]` for `["email"]`, `self.created`)."""
    n, word, val = rng.choice(NOUNS), rng.choice(WORDS), rng.randint(2, 999)
    key, wrong = rng.choice((("email", "mail"), ("owner_id", "owner"), ("created_at", "created"), ("price", "cost"),
                             ("quantity", "qty"), ("status", "state"), ("due_date", "due")))
    if rng.random() < 0.5:
        fn = rng.choice((f"{n}_{key}", f"get_{n}_{key}"))
        make = (f'def make_{n}(name, {key}):\n    return {{"name": name, "{key}": {key}}}\n',) * 2
        block = _fn(fn, n, f"The `{key}` of a {n} built by make_{n}.", f"    return {n}@0\n",
                    (rng.choice((f'["{wrong}"]', f'.get("{wrong}")')), f'["{key}"]'))
        return Bug((make, block), (f'm.{fn}(m.make_{n}("{word}", {val}))',), f"{fn} is broken",
                   shown=f'{fn}(make_{n}("{word}", {val}))')
    cls = n.capitalize()
    block = _pair(f"class {cls}:\n    def __init__(self, name, {key}):\n        self.name = name\n"
                  f"        self.{key} = {key}\n\n    def describe(self):\n"
                  f'        return f"{{self.name}} ({{self.@0}})"\n', (wrong, key))
    return Bug((block,), (f'm.{cls}("{word}", {val}).describe()',), f"{cls}.describe fails")


def early_break(rng: random.Random) -> Bug:
    """`break` where the loop should `continue` past one element."""
    n, ns, seq = _noun(rng)
    cond, what, odd = rng.choice((("x is None", "that are not None", "None"), ("x < 0", "that are not negative", "-3"),
                                  ("not x", "that are not empty or zero", "0")))
    fn, init, add, doc = rng.choice(((rng.choice((f"clean_{ns}", f"kept_{ns}", f"usable_{ns}")), "result = []",
                                      "result.append(x)", f"The {ns} {what}, in order."),
                                     (rng.choice((f"{n}_total", f"sum_{ns}")), "result = 0", "result += x",
                                      f"Sum of the {ns} {what}.")))
    block = _fn(fn, seq, doc, f"    {init}\n    for x in {seq}:\n        if {cond}:\n            @0\n"
                f"        {add}\n    return result\n", ("break", "continue"))
    a, b, c = _ints(rng, 3)
    return Bug((block,), (f"m.{fn}([{a}, {odd}, {b}, {c}])",), f"{fn} stops too early", keep=(f"m.{fn}({[a, b, c]})",))


def api_misuse(rng: random.Random) -> Bug:
    """Two files: a helper module's units/signature/return type changed and the caller (the fix) misuses it."""
    n, ns, _ = _noun(rng)
    word, prio = rng.choice(WORDS), rng.randint(1, 9)
    ustem, ufn, small, big, factor, ubody = rng.choice((
        ("timeutil", "format_duration", "milliseconds", "seconds", 1000, 'f"{x / 1000:.1f}s"'),
        ("money", "format_price", "cents", "dollars", 100, 'f"${x / 100:.2f}"'),
        ("lengths", "format_length", "millimeters", "meters", 1000, 'f"{x / 1000:.2f} m"')))
    stem, fn, support, caller, params, doc, body, edit, call, title = rng.choice((
        (ustem, ufn, f'"""Formatting helpers. Since v2 they all take {small}."""\n\n\n' +
         _fn(ufn, "x", f"Human text for `x` {small}.", f"    return {ubody}\n")[0],
         rng.choice((f"{n}_summary", f"describe_{n}")), f"name, {big}", f"One line: the {n} `name` and its `{big}`.",
         'f"{name}: {REF(@0)}"', (big, f"{big} * {factor}"), f'("{word}", {rng.randint(2, 30)})',
         f"shows amounts {factor} times too small"),
        (rng.choice(("factory", "build", "models")), f"make_{n}",
         f'"""Building {ns}. Since 2.0 the options are keyword-only."""\n\n\n'
         f"def make_{n}(name, *, priority=0, tags=()):\n"
         '    return {"name": name, "priority": priority, "tags": tags}\n',
         rng.choice((f"urgent_{n}", f"priority_{n}")), "name", f"A new {n} with priority {prio}.", "REF(@0)",
         (f"name, {prio}", f"name, priority={prio}"), f'("{word}")', "raises TypeError"),
        (rng.choice(("parsing", "codec", "wire")), f"parse_{n}",
         f'"""Parsing {n} strings. parse_{n} returns a tuple now (it was a dict)."""\n\n\n' +
         _fn(f"parse_{n}", "text", '(name, value) of "name=value".',
             '    name, _, value = text.partition("=")\n    return name.strip(), int(value)\n')[0],
         rng.choice((f"{n}_value", f"value_of_{n}")), "text", f'The value of a "name=value" {n} string.',
         "REF(text)@0", ('["value"]', "[1]"), f'("{word}={rng.randint(2, 99)}")', "broke after the upgrade")))
    head, ref = rng.choice(((f"from .{stem} import {fn}\n", fn), (f"from . import {stem}\n", f"{stem}.{fn}")))
    block = _fn(caller, params, doc, f"    return {body.replace('REF', ref)}\n", edit)
    return Bug((block,), (f"m.{caller}{call}",), f"{caller} {title}", header=head, support=((stem, support),))


def wrong_bool_op(rng: random.Random) -> Bug:
    """`and` for `or` (or back) in a permission or range check."""
    n, (a, b), owner = rng.choice(NOUNS[1:]), rng.sample(WORDS, 2), rng.choice(("owner", "author", "creator"))
    lo, hi = rng.randint(1, 20), rng.randint(30, 60)
    fn, params, doc, body, edit, call, keep = rng.choice((
        (rng.choice((f"can_edit_{n}", f"may_change_{n}")), f"user, {n}", f"Admins and the {n}'s {owner} may edit it.",
         f'user["admin"] @0 user["name"] == {n}["{owner}"]', ("and", "or"),
         f'({{"admin": True, "name": "{a}"}}, {{"{owner}": "{b}"}})',
         f'({{"admin": True, "name": "{a}"}}, {{"{owner}": "{a}"}})'),
        (rng.choice((f"{n}_in_range", f"valid_{n}_size")), f"value, low={lo}, high={hi}",
         "True when low <= value <= high.", "value >= low @0 value <= high", ("or", "and"),
         f"({hi + rng.randint(1, 50)})", f"({lo})")))
    return Bug((_fn(fn, params, doc, f"    return {body}\n", edit),), (f"m.{fn}{call}",),
               f"{fn} gives the wrong answer", keep=(f"m.{fn}{keep}",))


def int_division(rng: random.Random) -> Bug:
    """`//` where a float mean is wanted, or `/` where an index is."""
    (n, _, seq), x = _noun(rng), rng.randint(1, 40)
    fn, doc, body, edit, call, title = rng.choice((
        (rng.choice((f"mean_{n}", f"average_{n}_size")), f"Arithmetic mean of `{seq}` (a float).",
         f"sum({seq}) @0 len({seq})", ("//", "/"), f"[{x}, {x + 1}]", "rounds down"),
        (rng.choice((f"middle_{n}", f"median_{n}")), f"The middle element of the sorted `{seq}`.",
         f"sorted({seq})[len({seq}) @0 2]", ("/", "//"), str(_ints(rng, 5)), "raises TypeError")))
    return Bug((_fn(fn, seq, doc, f"    return {body}\n", edit),), (f"m.{fn}({call})",), f"{fn} {title}")


def wrong_index(rng: random.Random) -> Bug:
    """Index 0 for -1 (or back): the first element instead of the last."""
    n, ns, seq = _noun(rng)
    ext = f'"{rng.choice(WORDS)}.tar.{rng.choice(("gz", "xz", "bz2"))}"'
    fn, params, doc, edit, call = rng.choice((
        (rng.choice((f"latest_{n}", f"newest_{n}")), seq, f"The last {n} of `{seq}` (oldest first).", ("0", "-1"),
         str(_ints(rng, 3))),
        (rng.choice((f"oldest_{n}", f"earliest_{n}")), seq, f"The first {n} of `{seq}` (oldest first).", ("-1", "0"),
         str(_ints(rng, 3))),
        (rng.choice((f"{n}_extension", f"{n}_suffix")), "filename", "The text after the last dot of `filename`.",
         ("0", "-1"), ext)))
    body = f"    return {seq}[@0]\n" if params == seq else '    return filename.split(".")[@0]\n'
    return Bug((_fn(fn, params, doc, body, edit),), (f"m.{fn}({call})",), f"{fn} picks the wrong {n}")


def missing_copy(rng: random.Random) -> Bug:
    """A list mutated in place where the docstring promises a copy."""
    (n, ns, seq), data = _noun(rng), _ints(rng, 4)
    data = data if data != sorted(data) else data[::-1]  # unsorted, so sorting in place shows
    if rng.random() < 0.5:
        fn, args = rng.choice((f"sorted_{ns}", f"ordered_{ns}")), ""
        block = _fn(fn, seq, f"A sorted copy of `{seq}`; the argument is left unchanged.",
                    f"@0    {seq}.sort()\n    return {seq}\n", ("", f"    {seq} = list({seq})\n"))
    else:
        fn, args = rng.choice((f"with_{n}", f"plus_{n}")), ", 0"
        block = _fn(fn, f"{seq}, extra", f"A new list: `{seq}` then `extra`; `{seq}` is left as is.",
                    "    result = @0\n    result.append(extra)\n    return result\n", (seq, f"list({seq})"))
    return Bug((block,), (f"(lambda d: (m.{fn}(d{args}), d)[1])({data})",), f"{fn} changes its argument",
               shown=f"data = {data}; {fn}(data{args}); data")


FAMILIES: dict[str, Callable[[random.Random], Bug]] = {f.__name__: f for f in (
    off_by_one, wrong_comparison, wrong_arithmetic, inverted_condition, wrong_return, missing_none_check,
    wrong_variable, swapped_args, mutable_default, wrong_exception, missing_return, wrong_default, format_order,
    wrong_key, early_break, api_misuse, wrong_bool_op, int_division, wrong_index, missing_copy)}
