#!/usr/bin/env python3
"""Checks WIRE.md's argument tables against the scripts: every KEYS[n] and ARGV[n] a script reads has a row, and
every row names a position its script reads.

    python3 wire/check_arguments.py            (from the repository root, or from anywhere)
    python3 wire/check_arguments.py -v         (also prints what each script reads)

Standard library only. It reads every wire/scripts/*.lua with a small Lua lexer (comments and strings skipped) and
collects the positions each script indexes:

- `KEYS[3]`, `ARGV[9]`: a fixed position;
- `KEYS[i]` inside `for i = 7, 8 do … end` (bounds that are integer literals): each position of the range, fixed;
- anything else is **variadic**, a run of positions whose length the caller chooses: `ARGV[i]` inside
  `for i = 10, #ARGV do`, `ARGV[i + 1]`-style arithmetic on a loop variable, `KEYS[2 * n + i]`, `KEYS[#KEYS]`,
  `unpack(KEYS, 2)`, `ipairs(ARGV)`, or `KEYS`/`ARGV` passed on whole. Its start is the index at the loop's lower
  bound (or `unpack`'s start) when that can be computed, else unknown.

It then reads WIRE.md's section "Arguments of every script": one `#### \\`<script>\\`` heading per script, each
followed by a table whose rows start with a position, `KEYS[n]` (one position) or `KEYS[n…]` (a variadic row: `n`
and every later position; `...` is accepted for `…`). The rules:

- a fixed position a script reads needs a fixed row, or a variadic row of the same array starting at or before it;
- a variadic read needs a variadic row of the same array starting at or before its start (any one, when its start
  is unknown);
- a fixed row must name a fixed position the script reads, unless the row says **not read** (a position the
  script takes but never reads, which holds the place of later ones): then the script must not read it;
- a variadic row must start where the script's earliest variadic read of that array starts (when every variadic
  read's start is unknown, any start is accepted); a variadic row for a script that reads no variadic run is
  refused.

Exit status 0 when WIRE.md and the scripts agree, 1 naming every disagreement, 2 when a file cannot be read.
"""

import argparse
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPTS = os.path.join(HERE, "scripts")
WIRE_MD = os.path.join(ROOT, "WIRE.md")
SECTION = "Arguments of every script"
ARRAYS = ("KEYS", "ARGV")


# --- Lua -------------------------------------------------------------------------------------------------------------


def lex(text):
    """Lua 5.1 tokens as (kind, value, line): kinds 'name', 'number', 'string', 'op'. Comments are dropped."""
    tokens, i, line, n = [], 0, 1, len(text)
    ops = ("...", "..", "==", "~=", "<=", ">=")

    def long_bracket(at):
        """The length of `[==[`'s level at `at` (`[[` is 0), or None when no long bracket opens there."""
        m = re.match(r"\[(=*)\[", text[at:])
        return len(m.group(1)) if m else None

    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif text.startswith("--", i):
            level = long_bracket(i + 2)
            if level is not None:
                close = "]" + "=" * level + "]"
                end = text.find(close, i)
                end = n if end < 0 else end + len(close)
            else:
                end = text.find("\n", i)
                end = n if end < 0 else end
            line += text.count("\n", i, end)
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            tokens.append(("string", text[i + 1:j], line))
            line += text.count("\n", i, j)
            i = j + 1
        elif c == "[" and long_bracket(i) is not None:
            level = long_bracket(i)
            close = "]" + "=" * level + "]"
            end = text.find(close, i)
            end = n if end < 0 else end + len(close)
            tokens.append(("string", text[i:end], line))
            line += text.count("\n", i, end)
            i = end
        elif c.isalpha() or c == "_":
            m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[i:])
            tokens.append(("name", m.group(0), line))
            i += len(m.group(0))
        elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            m = re.match(r"0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?", text[i:])
            tokens.append(("number", m.group(0), line))
            i += len(m.group(0))
        else:
            op = next((o for o in ops if text.startswith(o, i)), c)
            tokens.append(("op", op, line))
            i += len(op)
    return tokens


def evaluate(expr, env):
    """The integer value of a token list made of integer literals, names bound in `env`, + - * % and parentheses;
    None when it holds anything else (a name not in `env`, `#KEYS`, a call)."""
    out = []
    for kind, value, _ in expr:
        if kind == "number" and re.fullmatch(r"[0-9]+", value):
            out.append(value)
        elif kind == "name" and value in env and env[value] is not None:
            out.append(str(env[value]))
        elif kind == "op" and value in ("+", "-", "*", "%", "(", ")"):
            out.append(value)
        else:
            return None
    if not out:
        return None
    try:
        return int(eval("".join(out), {"__builtins__": {}}, {}))  # only digits and + - * % ( ) reach this
    except (SyntaxError, ZeroDivisionError, ValueError):
        return None


class Reads:
    """What one script reads of KEYS and ARGV: fixed positions, and variadic runs by start (None: unknown)."""

    def __init__(self):
        self.fixed = {a: {} for a in ARRAYS}  # position -> first line
        self.variadic = {a: {} for a in ARRAYS}  # start (or None) -> first line

    def add_fixed(self, array, position, line):
        self.fixed[array].setdefault(position, line)

    def add_variadic(self, array, start, line):
        self.variadic[array].setdefault(start, line)


def split_top(tokens, separator):
    """`tokens` split at top-level (unbracketed) `separator` ops."""
    parts, depth, current = [], 0, []
    for tok in tokens:
        if tok[0] == "op" and tok[1] in "([{":
            depth += 1
        elif tok[0] == "op" and tok[1] in ")]}":
            depth -= 1
        if depth == 0 and tok == ("op", separator, tok[2]):
            parts.append(current)
            current = []
        else:
            current.append(tok)
    parts.append(current)
    return parts


def closing(tokens, at):
    """The index of the bracket closing the one at `at`."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    opener = tokens[at][1]
    depth = 0
    for j in range(at, len(tokens)):
        kind, value, _ = tokens[j]
        if kind == "op" and value == opener:
            depth += 1
        elif kind == "op" and value == pairs[opener]:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced %r at line %d" % (opener, tokens[at][2]))


def reads_of(text):
    """What a script's text reads (see the module docs)."""
    tokens = lex(text)
    reads = Reads()
    # The open blocks: None for a block that binds no numeric loop variable, else (name, lower, upper): the bounds'
    # values, None where a bound is not an integer literal (or the step is not 1, for the upper one).
    blocks = []
    pending_loop = None  # a numeric `for`'s binding, waiting for its `do`
    loop_header = False  # between `for`/`while` and their `do`
    i = 0
    while i < len(tokens):
        kind, value, line = tokens[i]
        if kind == "name" and value == "for":
            loop_header = True
            if i + 2 < len(tokens) and tokens[i + 1][0] == "name" and tokens[i + 2] == ("op", "=", tokens[i + 2][2]):
                # for NAME = lo, hi[, step] do
                j = i + 3
                header = []
                while not (tokens[j][0] == "name" and tokens[j][1] == "do"):
                    header.append(tokens[j])
                    j += 1
                bounds = split_top(header, ",")
                env = loop_env(blocks)
                lo = evaluate(bounds[0], env)
                hi = evaluate(bounds[1], env) if len(bounds) > 1 else None
                step = evaluate(bounds[2], env) if len(bounds) > 2 else 1
                pending_loop = (tokens[i + 1][1], lo, hi if step == 1 else None)
            else:
                pending_loop = None
            i += 1
            continue
        if kind == "name" and value == "while":
            loop_header = True
            pending_loop = None
        elif kind == "name" and value == "do":
            blocks.append(pending_loop if loop_header else None)
            pending_loop, loop_header = None, False
        elif kind == "name" and value in ("function", "if", "repeat"):
            blocks.append(None)
        elif kind == "name" and value in ("end", "until"):
            if blocks:
                blocks.pop()
        elif kind == "name" and value in ARRAYS:
            array = value
            before = tokens[i - 1] if i else None
            after = tokens[i + 1] if i + 1 < len(tokens) else None
            if before and before[0] == "op" and before[1] == "#":
                pass  # #KEYS: a length, not a read
            elif before and before[0] == "op" and before[1] in (".", ":"):
                pass  # a field or method named KEYS of something else
            elif after and after[0] == "op" and after[1] == "[":
                end = closing(tokens, i + 1)
                index_of(reads, array, tokens[i + 2:end], blocks, line)
                i = end + 1
                continue
            else:
                call_read(reads, array, tokens, i, blocks, line)
        i += 1
    return reads


def loop_env(blocks):
    """The numeric loop variables in scope, bound to their lower bounds."""
    env = {}
    for block in blocks:
        if block:
            env[block[0]] = block[1]
    return env


def index_of(reads, array, expr, blocks, line):
    """Records `array[expr]`."""
    constant = evaluate(expr, {})
    if constant is not None:
        reads.add_fixed(array, constant, line)
        return
    names = {v for k, v, _ in expr if k == "name"}
    loops = [b for b in blocks if b and b[0] in names]
    others = names - {b[0] for b in loops}
    if loops and not others and all(b[1] is not None and b[2] is not None for b in loops) and len(loops) == 1:
        # A loop between integer literals: every index it reaches is a fixed position.
        var, lo, hi = loops[0]
        for value in range(lo, hi + 1):
            position = evaluate(expr, {var: value})
            if position is None:
                break
            reads.add_fixed(array, position, line)
        else:
            return
    start = evaluate(expr, loop_env(blocks)) if loops and not others else None
    reads.add_variadic(array, start, line)


def call_read(reads, array, tokens, i, blocks, line):
    """Records KEYS/ARGV used whole: `unpack(ARGV, 3)` (a run from 3), `ipairs(KEYS)` (from 1), anything else (a run
    whose start is unknown)."""
    # Is it the first argument of unpack(...) or ipairs(...)?
    if i >= 2 and tokens[i - 1] == ("op", "(", tokens[i - 1][2]) and tokens[i - 2][0] == "name":
        callee = tokens[i - 2][1]
        if callee in ("unpack", "ipairs"):
            end = closing(tokens, i - 1)
            args = split_top(tokens[i:end], ",")
            start = 1
            if callee == "unpack" and len(args) > 1:
                start = evaluate(args[1], loop_env(blocks))
            reads.add_variadic(array, start, line)
            return
    reads.add_variadic(array, None, line)


# --- WIRE.md ---------------------------------------------------------------------------------------------------------

ROW = re.compile(r"^\|\s*`(KEYS|ARGV)\[([0-9]+)(…|\.\.\.)?\]`\s*\|")
HEADING = re.compile(r"^####\s+`([^`]+)`\s*$")


def tables_of(md):
    """{script: {"fixed": {array: {position: line}}, "variadic": {array: {start: line}}}} from the section, and the
    problems found reading it."""
    lines = md.split("\n")
    start = next((n for n, l in enumerate(lines) if l.startswith("#") and SECTION in l), None)
    if start is None:
        return None, ["WIRE.md has no section titled %r" % SECTION]
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    tables, problems, script = {}, [], None
    for n in range(start + 1, len(lines)):
        text = lines[n]
        hashes = len(text) - len(text.lstrip("#"))
        if text.startswith("#") and hashes <= level:
            break
        heading = HEADING.match(text)
        if heading:
            script = heading.group(1)
            if script in tables:
                problems.append("WIRE.md line %d: a second table for %s" % (n + 1, script))
            tables.setdefault(script, {"fixed": {a: {} for a in ARRAYS}, "variadic": {a: {} for a in ARRAYS},
                                       "unread": {a: {} for a in ARRAYS}})
            continue
        row = ROW.match(text)
        if not row:
            if text.startswith("| `KEYS") or text.startswith("| `ARGV"):
                problems.append("WIRE.md line %d: a row whose position cannot be read: %s" % (n + 1, text[:60]))
            continue
        if script is None:
            problems.append("WIRE.md line %d: a row before any script's heading" % (n + 1))
            continue
        array, position, run = row.group(1), int(row.group(2)), row.group(3)
        kind = "variadic" if run else "fixed"
        if "**not read**" in text:
            if run:
                problems.append("WIRE.md line %d: a variadic row cannot be **not read**" % (n + 1))
                continue
            kind = "unread"
        seen = tables[script][kind][array]
        # One row per position: a fixed row and a **not read** row name the same kind of position.
        twice = position in seen or (kind != "variadic" and any(
            position in tables[script][other][array] for other in ("fixed", "unread") if other != kind))
        if twice:
            problems.append("WIRE.md line %d: %s %s[%d%s] is listed twice" % (n + 1, script, array, position,
                                                                             "…" if run else ""))
        seen.setdefault(position, n + 1)
    return tables, problems


# --- The check -------------------------------------------------------------------------------------------------------


def check(scripts, tables):
    """Every disagreement, as readable lines."""
    problems = []
    for name in sorted(set(scripts) - set(tables)):
        problems.append("%s: the script has no argument table in WIRE.md (a heading #### `%s`)" % (name, name))
    for name in sorted(set(tables) - set(scripts)):
        problems.append("%s: WIRE.md has an argument table for a script that does not exist" % name)
    for name in sorted(set(scripts) & set(tables)):
        reads, table = scripts[name], tables[name]
        for array in ARRAYS:
            rows, runs, unread = table["fixed"][array], table["variadic"][array], table["unread"][array]
            fixed, variadic = reads.fixed[array], reads.variadic[array]
            # What the script reads, documented?
            for position, line in sorted(fixed.items()):
                if position not in rows and not any(start <= position for start in runs):
                    problems.append("%s: reads %s[%d] (line %d) but WIRE.md's table has no row for it"
                                    % (name, array, position, line))
            for start, line in sorted(variadic.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
                if start is None:
                    covered = bool(runs)
                else:
                    covered = any(s <= start for s in runs)
                if not covered:
                    where = "%s[%d…]" % (array, start) if start is not None else "a variadic run of %s" % array
                    problems.append("%s: reads %s (line %d) but WIRE.md's table has no variadic row (%s[n…]) for it"
                                    % (name, where, line, array))
            # What the table documents, read?
            for position, line in sorted(unread.items()):
                if position in fixed:
                    problems.append("%s: WIRE.md line %d says %s[%d] is not read, but the script reads it (line %d)"
                                    % (name, line, array, position, fixed[position]))
            for position, line in sorted(rows.items()):
                if position not in fixed:
                    problems.append("%s: WIRE.md line %d has a row for %s[%d], which the script does not read%s"
                                    % (name, line, array, position,
                                       " as a fixed position" if variadic else ""))
            known = [s for s in variadic if s is not None]
            for start, line in sorted(runs.items()):
                if not variadic:
                    problems.append("%s: WIRE.md line %d has a variadic row %s[%d…], but the script reads no "
                                    "variadic run of %s" % (name, line, array, start, array))
                elif known and start != min(known):
                    problems.append("%s: WIRE.md line %d has a variadic row %s[%d…], but the script's variadic "
                                    "reads of %s start at %d" % (name, line, array, start, array, min(known)))
    return problems


def describe(reads):
    parts = []
    for array in ARRAYS:
        fixed = sorted(reads.fixed[array])
        runs = sorted(("%d…" % s if s is not None else "?…") for s in reads.variadic[array])
        items = ["%d" % p for p in fixed] + runs
        parts.append("%s[%s]" % (array, ", ".join(items)))
    return " ".join(parts)


def main():
    parser = argparse.ArgumentParser(description="Check WIRE.md's argument tables against wire/scripts/*.lua.")
    parser.add_argument("-v", "--verbose", action="store_true", help="print what each script reads")
    parser.add_argument("--wire-md", default=WIRE_MD, help="the WIRE.md to check (default: the repository's)")
    args = parser.parse_args()
    try:
        scripts = {}
        for path in sorted(glob.glob(os.path.join(SCRIPTS, "*.lua"))):
            with open(path, encoding="utf-8") as f:
                scripts[os.path.basename(path)[:-4]] = reads_of(f.read())
        with open(args.wire_md, encoding="utf-8") as f:
            md = f.read()
    except (OSError, ValueError) as err:
        print("check_arguments: %s" % err, file=sys.stderr)
        return 2
    if not scripts:
        print("check_arguments: no scripts in %s" % SCRIPTS, file=sys.stderr)
        return 2
    if args.verbose:
        for name, reads in sorted(scripts.items()):
            print("%-18s %s" % (name, describe(reads)))
    tables, problems = tables_of(md)
    if tables is not None:
        problems += check(scripts, tables)
    for problem in problems:
        print(problem)
    rows = sum(len(t[k][a]) for t in (tables or {}).values() for k in ("fixed", "variadic", "unread") for a in ARRAYS)
    if problems:
        print("check_arguments: %d problem(s) (%d scripts, %d rows)" % (len(problems), len(scripts), rows))
        return 1
    print("check_arguments: ok: %d scripts, %d rows; every position read has a row, every row is read"
          % (len(scripts), rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
