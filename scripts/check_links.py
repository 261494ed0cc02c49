#!/usr/bin/env python3
"""Checks every relative link and #anchor in the repository's Markdown files.

    scripts/check_links.py              check the tracked *.md files of this tree
    scripts/check_links.py --self-test  check the checker on links known good and bad

A link resolves when its path names a tracked file or a folder holding one
(a link to an untracked file would break in a clean clone), and its
#anchor, in a Markdown file, names a heading there by GitHub's slug (lower
case, punctuation dropped, spaces to hyphens, -1, -2 for repeats) or an
HTML id/name. http(s), mailto and other scheme links are not followed;
links inside code blocks and code spans are not links. Folders named
node_modules or target are skipped. Exits 1 and names each broken link.
Standard library only (make check-links, run by make test).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import unicodedata
from urllib.parse import unquote

SKIP_DIRS = {"node_modules", "target", ".git"}

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
# [text](dest "title") and ![alt](dest); the text may hold one level of brackets.
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"
    r"\(\s*(<[^<>\n]*>|[^\s()<>]*(?:\([^\s()]*\)[^\s()<>]*)*)"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)"
)
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^<>]*>|\S+)", re.M)
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')", re.I)
HTML_ANCHOR = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")


def skipped(path: str) -> bool:
    return any(part in SKIP_DIRS for part in path.split("/"))


def tracked_files(root: str) -> list[str] | None:
    """The files git tracks under root (its index), or None outside git."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def walked_files(root: str) -> list[str]:
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        rel = os.path.relpath(folder, root)
        for name in sorted(names):
            files.append(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
    return files


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out = []
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
            out.append((number, line))
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):].strip():
            fence = None
    return out


def without_code_spans(line: str) -> str:
    return CODE_SPAN.sub(lambda m: "x" * len(m.group(0)), line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's Markdown text."""
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), heading)
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("*", "")  # emphasis
    keep = [c for c in text.lower() if c in " -_" or unicodedata.category(c)[0] in "LNM"]
    return "".join(keep).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every #anchor a Markdown file offers: heading slugs (with GitHub's -1, -2) and HTML ids."""
    seen: dict[str, int] = {}
    found: set[str] = set()

    def add(heading: str) -> None:
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")

    previous = ""
    for _, line in prose_lines(text):
        m = HEADING.match(line)
        if m:
            add(re.sub(r"[ \t]+#+[ \t]*$", "", m.group(2) or ""))
            previous = ""
            continue
        s = SETEXT.match(line)
        if s and previous.strip() and not previous.lstrip().startswith(("|", "-", "*", "+", ">")) and not re.match(r"\s*\d+[.)]\s", previous):
            add(previous.strip())
            previous = ""
            continue
        for m in HTML_ANCHOR.finditer(without_code_spans(line)):
            found.add(m.group(1) if m.group(1) is not None else m.group(2))
        previous = line
    return found


def links(text: str) -> list[tuple[int, str]]:
    """(line number, destination) of every link in a Markdown file's prose."""
    out = []
    lines = prose_lines(text)
    for number, line in lines:
        line = without_code_spans(line)
        for m in INLINE_LINK.finditer(line):
            out.append((number, m.group(1)))
        for m in HTML_LINK.finditer(line):
            out.append((number, m.group(1) if m.group(1) is not None else m.group(2)))
        m = REFERENCE_DEF.match(line)
        if m:
            out.append((number, m.group(1)))
    return [(n, d[1:-1] if d.startswith("<") and d.endswith(">") else d) for n, d in out]


def check(root: str) -> list[str]:
    """The broken links of the Markdown files under root, one message each."""
    files = tracked_files(root)
    if files is None:
        files = walked_files(root)
    files = [f for f in files if not skipped(f)]
    known = set(files)
    folders = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}
    markdown = sorted(f for f in files if f.lower().endswith(".md") and os.path.isfile(os.path.join(root, f)))
    cache: dict[str, set[str]] = {}

    def anchors_of(path: str) -> set[str]:
        if path not in cache:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                cache[path] = anchors(f.read())
        return cache[path]

    errors = []
    for source in markdown:
        with open(os.path.join(root, source), encoding="utf-8") as f:
            text = f.read()
        for number, dest in links(text):
            if not dest or SCHEME.match(dest):
                continue
            path, _, fragment = dest.partition("#")
            path = unquote(path.split("?", 1)[0])
            if path:
                base = "" if path.startswith("/") else os.path.dirname(source)
                target = os.path.normpath(os.path.join(base, path.lstrip("/"))).replace(os.sep, "/")
                if target.startswith("../") or target == "..":
                    errors.append(f"{source}:{number}: broken link {dest}: outside the repository")
                    continue
                if target != "." and target not in known and target not in folders:
                    errors.append(f"{source}:{number}: broken link {dest}: no tracked file {target}")
                    continue
            else:
                target = source
            if fragment and target in known and target.lower().endswith(".md"):
                if unquote(fragment) not in anchors_of(target):
                    errors.append(f"{source}:{number}: broken anchor {dest}: no heading #{fragment} in {target}")
    return errors


SELF_TEST = {
    "README.md": """# Top

See [the guide](docs/guide.md), [its part](docs/guide.md#part-two-cost-0),
[a repeat](docs/guide.md#repeat-1), [here](#top), [images](docs/pic.svg),
![pic](docs/pic.svg "a title"), [a folder](docs), [web](https://example.com/x#y),
[中文](docs/guide.md#laravel-扩展包), <a href="docs/guide.md#explicit">html</a>,
[ref][r] and [a code span](docs/guide.md#thrott1ing) is fine: `[not](a-link.md)`.

[r]: docs/guide.md#top

```
[not a link](nowhere.md)
# not a heading
```

BROKEN
""",
    "docs/guide.md": """# Top

## Part two: `COST 0`

## Repeat
## Repeat

### `THROTT1.ING`

## Laravel 扩展包

<a id="explicit"></a>
""",
    "docs/pic.svg": "<svg/>",
    "node_modules/x/README.md": "[broken, but skipped](nowhere.md)\n",
}


def self_test() -> int:
    """The checker on a small tree: passes clean, then fails on each planted break."""
    broken = {
        "[gone](docs/missing.md)": "broken link docs/missing.md: no tracked file docs/missing.md",
        "[bad anchor](docs/guide.md#part-three)": "broken anchor docs/guide.md#part-three: no heading #part-three in docs/guide.md",
        "[bad local anchor](#nowhere)": "broken anchor #nowhere: no heading #nowhere in README.md",
        "[escape](../outside.md)": "broken link ../outside.md: outside the repository",
    }
    failures = []
    for use_git in (True, False):
        with tempfile.TemporaryDirectory() as root:
            for path, text in SELF_TEST.items():
                os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
                with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                    f.write(text.replace("BROKEN\n", ""))
            if use_git:
                try:
                    subprocess.run(["git", "init", "-q", root], check=True, capture_output=True)
                    subprocess.run(["git", "-C", root, "add", "-A", "-f"], check=True, capture_output=True)
                except (OSError, subprocess.CalledProcessError):
                    continue
            mode = "git" if use_git else "no git"
            errors = check(root)
            if errors:
                failures.append(f"{mode}: a clean tree reported {errors}")
            readme = os.path.join(root, "README.md")
            for link, message in broken.items():
                with open(readme, "w", encoding="utf-8") as f:
                    f.write(SELF_TEST["README.md"].replace("BROKEN", link))
                errors = check(root)
                expected = [f"README.md:16: {message}"]
                if errors != expected:
                    failures.append(f"{mode}: {link} gave {errors}, expected {expected}")
            if use_git:
                # A file on disk that git does not track is not a link target.
                with open(os.path.join(root, "untracked.md"), "w", encoding="utf-8") as f:
                    f.write("# Untracked\n")
                with open(readme, "w", encoding="utf-8") as f:
                    f.write(SELF_TEST["README.md"].replace("BROKEN", "[new](untracked.md)"))
                errors = check(root)
                expected = ["README.md:16: broken link untracked.md: no tracked file untracked.md"]
                if errors != expected:
                    failures.append(f"{mode}: an untracked target gave {errors}, expected {expected}")
    for failure in failures:
        print(f"check_links self-test: {failure}", file=sys.stderr)
    if not failures:
        print("check_links self-test: passed (a clean tree passes; a missing file, a missing anchor, a local anchor, a path outside, an untracked target fail)")
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    if argv == ["--self-test"]:
        return self_test()
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = check(root)
    for error in errors:
        print(error, file=sys.stderr)
    count = len([f for f in (tracked_files(root) or walked_files(root)) if f.lower().endswith(".md") and not skipped(f)])
    if errors:
        print(f"check-links: {len(errors)} broken link(s) in {count} Markdown files", file=sys.stderr)
        return 1
    print(f"check-links: every relative link and anchor in {count} Markdown files resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
