"""Count Jinja expressions in role YAML, and the multi-line ones that carry logic.

Usage: python tests/tooling/jinja_count.py [ROOT ...]   (default: roles)
       python tests/tooling/jinja_count.py --list [ROOT ...]   also print where each multi-line one with logic starts

An expression is a ``{{ ... }}`` or ``{% ... %}`` block in a ``.yml``/``.yaml``
file. It spans more than one line when a newline falls between its opening and
closing delimiters. It carries logic when it holds a filter (``|``), a test or
condition (``if``, ``is``, ``and``, ``or``, ``not``, ``in``, a comparison) or a
loop (``for``); a multi-line expression that only names a variable does not.
Templates (``.j2``) are left out: they are the place for Jinja.
"""

import re
import sys
from pathlib import Path

BLOCK = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
LOGIC = re.compile(r"\||\b(?:if|is|and|or|not|in|for)\b|==|!=|<=|>=|<|>")


def expressions(text):
    """Yield (line number, expression text) for each Jinja block in ``text``."""
    for match in BLOCK.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, match.group(0)


def count(roots):
    """Return (total, multi-line, multi-line with logic, [(path, line)] of the last)."""
    total = multi = logic = 0
    where = []
    for root in roots:
        for path in sorted(Path(root).rglob("*")):
            if path.suffix not in (".yml", ".yaml") or not path.is_file():
                continue
            for line, expr in expressions(path.read_text(encoding="utf-8")):
                total += 1
                if "\n" not in expr:
                    continue
                multi += 1
                inner = expr[2:-2]
                if LOGIC.search(inner):
                    logic += 1
                    where.append((str(path), line))
    return total, multi, logic, where


def main(argv):
    listing = "--list" in argv
    roots = [a for a in argv if a != "--list"] or ["roles"]
    total, multi, logic, where = count(roots)
    if listing:
        for path, line in where:
            print(f"{path}:{line}")
    print(f"jinja expressions: {total}")
    print(f"multi-line: {multi}")
    print(f"multi-line with logic: {logic}")


if __name__ == "__main__":
    main(sys.argv[1:])
