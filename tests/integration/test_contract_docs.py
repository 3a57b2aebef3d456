"""docs/contracts.md is the project's contract reference, and the repository cites it.

Nothing tracked cites the developers' private notes (a word ``SPEC``, as in "SPEC 2.7.1"): a user
cannot follow such a reference. Lowercase ``spec`` (speculative decoding) is fine, and so is ``SPEC`` as
a Python name (the kernels' constexpr flag), also quoted as a name in a string (``{"SPEC": True}``,
in source code a test compiles). The recorded history
(``bench/RESULTS.md``, ``bench/results/``) is left as it was written, and this file, which states the
rules with examples that break them, is not scanned. Every ``docs/contracts.md#anchor``
cited anywhere, and every ``(#anchor)`` link inside the page, must exist there: a heading's anchor as
GitHub renders it, or an explicit ``<a id=...>``. Every built-in contract has its section.
"""
import io
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "contracts.md"
HISTORY = ("bench/RESULTS.md", "bench/results/")  # measurements as recorded: never rewritten
SELF = "tests/integration/test_contract_docs.py"  # states the rules, with examples that break them
SPEC_WORD = re.compile(r"\bSPEC\b")
CITED = re.compile(r"contracts\.md#([A-Za-z0-9_-]+)")
LOCAL_LINK = re.compile(r"\]\(#([A-Za-z0-9_-]+)\)")
QUOTED_NAME = re.compile(r"""(["'])SPEC\1""")  # the constexpr's name as a string: a key, not a citation
EXPLICIT_ID = re.compile(r"""<a\s+(?:id|name)\s*=\s*["']([^"']+)["']""")
STRING_TYPES = {tokenize.STRING} | ({tokenize.FSTRING_MIDDLE} if hasattr(tokenize, "FSTRING_MIDDLE") else set())


def _tracked() -> list[str]:
    """The repository's files (git's list; outside a git checkout, the tree without hidden folders)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
        names = [n for n in out.stdout.decode().split("\0") if n]
    except (OSError, subprocess.SubprocessError):
        names = []
    if not names:
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                 and not any(part.startswith(".") or part == "__pycache__" or part.endswith(".egg-info")
                             for part in p.relative_to(ROOT).parts)]
    return sorted(n for n in (n.replace("\\", "/") for n in names) if not n.startswith(HISTORY) and n != SELF)


def _texts():
    """(relative path, text) of every tracked text file outside the history."""
    for name in _tracked():
        path = ROOT / name
        try:
            yield name, path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary (the report screenshot), or deleted in the working tree


def spec_citations(name: str, text: str) -> list[tuple[int, str]]:
    """(line, text) of each place `text` mentions SPEC as a citation (see the module docstring)."""
    lines = text.splitlines()
    if name.endswith(".py"):
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, SyntaxError, IndentationError):
            tokens = None
        if tokens is not None:
            hits = []
            for tok in tokens:
                if tok.type == tokenize.COMMENT or tok.type in STRING_TYPES:
                    for k, part in enumerate(QUOTED_NAME.sub("", tok.string).splitlines()):
                        if SPEC_WORD.search(part):
                            hits.append((tok.start[0] + k, lines[tok.start[0] + k - 1].strip()))
            return hits
    return [(i, line.strip()) for i, line in enumerate(lines, 1) if SPEC_WORD.search(line)]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the page: each heading's slug (deduplicated with -1, -2, ...) and every
    explicit <a id=...>."""
    anchors = set(EXPLICIT_ID.findall(markdown))
    seen: dict[str, int] = {}
    in_code = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        match = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))  # a link counts by its text
        title = re.sub(r"<[^>]+>", "", title).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_no_file_cites_the_private_spec():
    bad = [f"{name}:{line}: {text}" for name, body in _texts() for line, text in spec_citations(name, body)]
    assert not bad, ("cite docs/contracts.md (or say it in plain words), not SPEC:\n" + "\n".join(bad))


def test_every_cited_contract_anchor_exists():
    anchors = github_anchors(DOC.read_text(encoding="utf-8"))
    missing = []
    for name, body in _texts():
        for i, line in enumerate(body.splitlines(), 1):
            found = CITED.findall(line) + (LOCAL_LINK.findall(line) if name == "docs/contracts.md" else [])
            missing += [f"{name}:{i}: #{a}" for a in found if a not in anchors]
    assert not missing, "anchors cited but not in docs/contracts.md:\n" + "\n".join(missing)


def test_every_builtin_contract_has_its_section():
    from mambafuzz import contracts

    anchors = github_anchors(DOC.read_text(encoding="utf-8"))
    names = [m.rpartition(".")[2] for m in contracts.BUILTIN]
    assert not [n for n in names if n not in anchors], "contracts without a section in docs/contracts.md"


def test_the_checks_see_what_they_are_for():
    """The rules bite on the forms they target and spare the ones they allow."""
    assert spec_citations("a.md", "as SPEC 2.7.1 says") == [(1, "as SPEC 2.7.1 says")]
    assert spec_citations("a.md", "the spec window; IS_SPEC_DECODING") == []
    code = ('def k(SPEC: int):\n    if SPEC:  # SPEC 4\n        return {"SPEC": 1}\n    """SPEC\'s table."""\n'
            'run("consts = {\'SPEC\': True}")\n')
    assert [line for line, _ in spec_citations("k.py", code)] == [2, 4]
    page = "# Title\n<a id=\"x_y\"></a>\n## `conv_update`: the step\n## A, b & c\n## A, b & c\n"
    assert github_anchors(page) >= {"title", "x_y", "conv_update-the-step", "a-b--c", "a-b--c-1"}
