#!/usr/bin/env python3
"""docs/GUIDE.md shows each program of docs/snippets/ (which the test suite builds and runs) in a
```cpp block right after a line `<!-- snippet: NAME.cpp -->`. Fails when a block and its file
differ, when a marked file is missing, or when a snippet file is not shown.
Usage: check-guide.py [SOURCE_ROOT] [--write]  (--write copies the files into the guide)"""
import pathlib
import re
import sys

args = [a for a in sys.argv[1:] if a != "--write"]
root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parent.parent)
guide = root / "docs" / "GUIDE.md"
snippets = root / "docs" / "snippets"
text = guide.read_text()
pattern = re.compile(r"<!-- snippet: (\S+) -->\n```cpp\n(.*?)```\n", re.S)
errors, shown = [], set()


def replace(m):
    name, body = m.group(1), m.group(2)
    shown.add(name)
    path = snippets / name
    if not path.is_file():
        errors.append(f"docs/GUIDE.md shows {name}, but docs/snippets/{name} does not exist")
        return m.group(0)
    source = path.read_text()
    if body != source:
        errors.append(f"docs/GUIDE.md's block for {name} differs from docs/snippets/{name}")
    return f"<!-- snippet: {name} -->\n```cpp\n{source}```\n"


updated = pattern.sub(replace, text)
for path in sorted(snippets.glob("*.cpp")):
    if path.name not in shown:
        errors.append(f"docs/snippets/{path.name} is not shown in docs/GUIDE.md")
if "--write" in sys.argv:
    guide.write_text(updated)
    errors = [e for e in errors if "differs" not in e]
if errors:
    print("\n".join(errors), file=sys.stderr)
    print("(edit docs/snippets/*.cpp, then run: python3 tools/check-guide.py --write)", file=sys.stderr)
    sys.exit(1)
print(f"docs/GUIDE.md: {len(shown)} snippets match docs/snippets/")
