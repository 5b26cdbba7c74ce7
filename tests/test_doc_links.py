"""Every relative link of README.md and docs/*.md, and every repository path they cite in backticks, resolves to a
file of the repository (tracked by git where the checkout is a git one): a reader who follows one finds it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A markdown link or image target, without its title
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A path in backticks: a file name with an extension, under a folder
CITED = re.compile(r"`((?:\.\./)*[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+)`")


def repository_files() -> set[str]:
    """The repository's files (relative, with their folders), as git tracks them; every file on disk elsewhere."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        listed = "\n".join(str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file())
    files = set(listed.split())
    return files | {str(Path(f).parents[i]) for f in files for i in range(len(Path(f).parts) - 1)}


def cited_paths(doc: Path, text: str) -> list[tuple[str, str]]:
    """(as written, relative to the repository) of each link target (relative to `doc`) and each backticked path
    that names a top-level folder of the repository or leaves it (relative to the root, as the docs cite them)."""
    out = []
    for target in LINK.findall(text):
        target = target.split("#")[0]
        if target and not re.match(r"[a-z][a-z0-9+.-]*:", target):  # not a URL
            out.append((target, os.path.relpath((doc.parent / target).resolve(), ROOT)))
    tops = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")} - {"runs"}
    for path in CITED.findall(text):
        if path.startswith("../") or path.split("/")[0] in tops:
            out.append((path, os.path.relpath((ROOT / path).resolve(), ROOT)))
    return out


def test_every_link_and_cited_path_of_the_docs_resolves_in_the_repository():
    files = repository_files()
    missing = [f"{doc.relative_to(ROOT)}: {written}" for doc in DOCS
               for written, resolved in cited_paths(doc, doc.read_text(encoding="utf-8")) if resolved not in files]
    assert missing == []


def test_the_check_finds_a_broken_link_and_a_path_outside_the_repository():
    doc = ROOT / "docs" / "evidence.md"
    text = ("![x](docs/images/mechanism_simclr.png) [y](images/mechanism_simclr.png) `../shared/GPU.md` "
            "`docs/runs/gone.json` `insub_hf/jobs/cards.py` `results.json` [z](https://example.org/a.md)")
    files = repository_files()
    found = {written: resolved in files for written, resolved in cited_paths(doc, text)}
    assert found == {"docs/images/mechanism_simclr.png": False, "images/mechanism_simclr.png": True,
                     "../shared/GPU.md": False, "docs/runs/gone.json": False, "insub_hf/jobs/cards.py": True}


# A dotted name of the package, as the docs write one (`insub_hf.evaluation.flagging.expected_flag_band`)
PACKAGE_NAME = re.compile(r"\binsub_hf(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def unresolved_package_names(text: str) -> list[str]:
    """The dotted package names in `text` that do not resolve: the longest prefix that imports as a module, then
    each further part an attribute of what came before (a module the package no longer has fails here)."""
    import importlib

    missing = []
    for name in sorted(set(PACKAGE_NAME.findall(text))):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                found = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for part in parts[cut:]:
                    found = getattr(found, part)
            except AttributeError:
                missing.append(name)
            break
        else:
            missing.append(name)
    return missing


def test_every_package_name_the_docs_give_imports():
    missing = [f"{doc.relative_to(ROOT)}: {name}" for doc in DOCS
               for name in unresolved_package_names(doc.read_text(encoding="utf-8"))]
    assert missing == []


def test_the_name_check_finds_a_module_the_package_does_not_have():
    text = "`insub_hf.protocol.arguments.training_arguments`, `insub_hf.jobs.arguments.training_arguments`, `insub_hf.nope`"
    assert unresolved_package_names(text) == ["insub_hf.nope", "insub_hf.protocol.arguments.training_arguments"]
