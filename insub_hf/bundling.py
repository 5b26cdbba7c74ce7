"""Bundling the package's modules: the top-level definitions that some roots reach through the package's relative
imports, as one source each, in the order Python would run them (what `remote_code` writes beside a checkpoint).

A definition's source is the package's own, byte for byte, except that relative imports inside functions become
`pass` (in a bundle their names are module-level names already). Two different definitions of one name refuse to
meet in a bundle, naming it.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

PACKAGE = "insub_hf"
PACKAGE_DIR = Path(__file__).resolve().parent


def source_file(module: str) -> Path:
    """`insub_hf.losses.ntxent` -> its file (a package -> its `__init__.py`)."""
    path = PACKAGE_DIR.joinpath(*module.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The package module a relative `from .x import ...` in `module` reads (`x`, resolved against the level)."""
    is_package = source_file(module).name == "__init__.py"
    parts = module.split(".") if is_package else module.split(".")[:-1]
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def relative_imports(module: str, source: str | None = None) -> list[tuple[ast.ImportFrom, str]]:
    """Every relative import in `module` (module level or inside functions; of `source` when given, else of its
    file), with the package module it reads."""
    tree = ast.parse(source if source is not None else source_file(module).read_text(encoding="utf-8"))
    return [(node, _resolve(module, node)) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]


@dataclass
class _Statement:
    """One top-level statement of a package module: the names it binds, the (module, name) definitions and absolute
    imports it reads, and its source with the relative imports inside it dropped."""

    module: str
    index: int
    binds: tuple[str, ...]
    reads: set[tuple[str, str]] = field(default_factory=set)
    source: str = ""
    side_effect: bool = False
    gap: int = 2  # blank lines before it in its module, when the statement before it there is kept too  # a bare call: runs whenever its module is part of a bundle


def _read_names(node: ast.AST) -> set[str]:
    """The names a statement reads (loads and attribute roots). Functions' annotations are left out: every package
    module defers them (`from __future__ import annotations`), so they are strings that need nothing. A class body's
    are read (dataclasses and configs inspect them, e.g. for `ClassVar`)."""
    names: set[str] = set()

    def visit(child: ast.AST, in_class: bool = False) -> None:
        if isinstance(child, ast.arg):
            return
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for part in (*child.decorator_list, *child.args.defaults, *child.args.kw_defaults, *child.body):
                if part is not None:
                    visit(part)
            return
        if isinstance(child, ast.AnnAssign):
            for part in (child.target, child.value, child.annotation if in_class else None):
                if part is not None:
                    visit(part)
            return
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
            names.add(child.id)
        for grandchild in ast.iter_child_nodes(child):
            visit(grandchild, in_class=isinstance(child, ast.ClassDef))

    visit(node)
    return names


def bound_names(node: ast.stmt) -> tuple[str, ...]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return (node.name,)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return tuple(alias.asname or alias.name.split(".")[0] for alias in node.names)
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return tuple(n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name))


class _Module:
    """A package module's top-level statements and what each name it binds refers to."""

    def __init__(self, module: str, source: str):
        self.name = module
        lines = source.splitlines(keepends=True)
        tree = ast.parse(source)
        if "annotations" not in {a.name for n in tree.body if isinstance(n, ast.ImportFrom)
                                 and n.module == "__future__" for a in n.names}:
            raise RuntimeError(f"remote code: {module} lacks `from __future__ import annotations`.")
        self.statements: list[_Statement] = []
        self.relative: dict[str, tuple[str, str]] = {}  # local name -> (module, name) it imports
        self.absolute: dict[str, str] = {}  # local name -> the import statement that binds it
        self.module_imports: list[str] = []  # modules imported at module level, in order (Python's run order)
        self.local: dict[str, list[int]] = {}  # name -> the statements binding it
        for index, node in enumerate(tree.body):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and index == 0:
                continue  # the module docstring
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            if isinstance(node, ast.ImportFrom) and node.level:
                target = _resolve(module, node)
                self.module_imports.append(target)
                for alias in node.names:
                    if alias.asname or alias.name == "*":
                        raise RuntimeError(f"remote code: `{ast.unparse(node)}` in {module}: import names plainly.")
                    self.relative[alias.name] = (target, alias.name)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    single = (ast.Import(names=[alias]) if isinstance(node, ast.Import)
                              else ast.ImportFrom(module=node.module, names=[alias], level=0))
                    self.absolute[alias.asname or alias.name.split(".")[0]] = ast.unparse(single)
                continue
            first = _first_line(node)
            statement = _Statement(module, index, bound_names(node), side_effect=isinstance(node, ast.Expr))
            before = tree.body[index - 1] if index else None
            if before is not None:
                statement.gap = min(2, sum(not line.strip() for line in lines[before.end_lineno:first]))
            statement.source = self._drop_nested_imports(node, "".join(lines[first:node.end_lineno]), first)
            self.statements.append(statement)
            for name in statement.binds:
                self.local.setdefault(name, []).append(len(self.statements) - 1)
            statement.reads = {(module, name) for name in _read_names(node)}
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.level:
                    for alias in inner.names:
                        if alias.asname:
                            raise RuntimeError(f"remote code: `{ast.unparse(inner)}` in {module}: import names plainly.")
                        statement.reads.add((_resolve(module, inner), alias.name))

    def _drop_nested_imports(self, node: ast.stmt, source: str, first: int) -> str:
        """`source` (the statement `node`, from line `first`) with each relative import inside it replaced by
        `pass`: in a bundle the names it imports are module-level names already."""
        lines = source.splitlines(keepends=True)
        for inner in ast.walk(node):
            if not (isinstance(inner, ast.ImportFrom) and inner.level):
                continue
            start, end = inner.lineno - 1 - first, inner.end_lineno - first
            indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
            if lines[start].strip()[:4] != "from" or inner.col_offset != len(indent):
                raise RuntimeError(f"remote code: the import on line {inner.lineno} of {self.name} must stand alone.")
            lines[start:end] = [f"{indent}pass\n"] + [""] * (end - start - 1)
        return "".join(lines)


def _first_line(node: ast.stmt) -> int:
    """The 0-based first line of a statement, its decorators included."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]) - 1


class Bundler:
    """Which definitions each bundle needs, and their files."""

    def __init__(self, source_of: Callable[[str], str]):
        self.source_of = source_of  # a package module's name -> its source
        self.modules: dict[str, _Module] = {}

    def module(self, name: str) -> _Module:
        if name not in self.modules:
            self.modules[name] = _Module(name, self.source_of(name))
        return self.modules[name]

    def definition(self, module: str, name: str) -> tuple[str, str] | None:
        """What `name` read in `module` is: ("<module>", name) of its defining statement, ("import", statement) for an
        absolute import, None for a builtin or a local name."""
        seen = set()
        while (module, name) not in seen:
            seen.add((module, name))
            found = self.module(module)
            if name in found.local:
                return module, name
            if name in found.relative:
                module, name = found.relative[name]
                continue
            if name in found.absolute:
                return "import", found.absolute[name]
            return None
        raise RuntimeError(f"remote code: the imports of {name!r} in {module} go round in a circle.")

    def closure(self, roots: list[tuple[str, str]]) -> tuple[set[tuple[str, int]], set[str]]:
        """The statements (`(module, index)`) and absolute imports the `roots` (`(module, name)`) need; the bare calls
        of every module they use come along."""
        keep: set[tuple[str, int]] = set()
        imports: set[str] = set()
        todo = list(roots)
        used_modules: set[str] = set()
        while todo:
            module, name = todo.pop()
            found = self.definition(module, name)
            if found is None:
                continue
            if found[0] == "import":
                imports.add(found[1])
                continue
            owner = self.module(found[0])
            for index in owner.local[found[1]]:
                key = (owner.name, index)
                if key in keep:
                    continue
                keep.add(key)
                todo.extend(owner.statements[index].reads)
            if owner.name not in used_modules:
                used_modules.add(owner.name)
                for index, statement in enumerate(owner.statements):
                    if statement.side_effect and (owner.name, index) not in keep:
                        keep.add((owner.name, index))
                        todo.extend(statement.reads)
        return keep, imports

    def run_order(self, roots: list[str]) -> list[str]:
        """The modules in the order Python runs them when importing `roots` (a module after the ones it imports at
        module level), then those only imported inside functions."""
        order: list[str] = []
        visited: set[str] = set()

        def visit(module: str) -> None:
            visited.add(module)
            for target in self.module(module).module_imports:
                if target not in visited:
                    visit(target)
            order.append(module)

        for root in [*roots, *sorted(self.modules)]:
            if root not in visited:
                visit(root)
        return order


def assemble(bundler: Bundler, roots: list[str], own: set[tuple[str, int]],
             bundle: str) -> tuple[str, dict[str, str], dict[tuple[str, int], str]]:
    """The body of the bundle `bundle`: the statements `own` (`(module, index)`), in the order Python runs the
    modules of `roots`, each once (the same statement in two modules, `logger = ...`, once). Returns the body, the
    names it binds (name -> source) and where each statement went (`(module, index)` -> `bundle`)."""
    body, bound, placed, previous = [], {}, {}, None
    for module in bundler.run_order(roots):
        for index, statement in enumerate(bundler.module(module).statements):
            if (module, index) not in own:
                continue
            for name in statement.binds:
                if name in bound and bound[name] != statement.source:
                    raise RuntimeError(f"bundle {bundle}.py: two definitions of {name!r} meet in it; rename one.")
            if all(bound.get(name) == statement.source for name in statement.binds) and statement.binds:
                continue
            bound.update({name: statement.source for name in statement.binds})
            gap = statement.gap if previous == (module, index - 1) else 2
            body.append("\n" * gap + statement.source.rstrip("\n") + "\n")
            placed[(module, index)], previous = bundle, (module, index)
    return "".join(body), bound, placed


def grouped_imports(imports: set[str]) -> str:
    """Single-name import statements as one `import` line per module and one `from` line per package, sorted."""
    plain, by_package = [], {}
    for line in imports:
        node = ast.parse(line).body[0]
        if isinstance(node, ast.Import):
            plain.append(line)
        else:
            by_package.setdefault(node.module, []).append(line.split(" import ", 1)[1])
    froms = [from_import(package, names) for package, names in sorted(by_package.items())]
    return "".join(line + "\n" for line in sorted(plain) + froms)


def from_import(package: str, names) -> str:
    """`from package import a, b` (sorted), wrapped in parentheses past 120 characters."""
    line = f"from {package} import {', '.join(sorted(names))}"
    if len(line) <= 120:
        return line
    return f"from {package} import (\n" + textwrap.fill(
        ", ".join(sorted(names)) + ",", 116, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False
    ) + "\n)"


def summaries_only(source: str) -> str:
    """`source` with each docstring cut to its first paragraph: the copy is for running; the package's source is the
    documented one."""
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    cuts = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or not node.body:
            continue
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            cuts.append(first)
    for doc in sorted(cuts, key=lambda node: node.lineno, reverse=True):
        start, end = doc.lineno - 1, doc.end_lineno
        blank = next((i for i in range(start + 1, end - 1) if not lines[i].strip()), None)
        if blank is None:
            continue
        quote = lines[start].lstrip()[: lines[start].lstrip().index('"""') + 3]
        lines[start:end] = [*lines[start:blank - 1], lines[blank - 1].rstrip("\n") + quote.lstrip("rbuRBU") + "\n"]
    trimmed = "".join(lines)
    ast.parse(trimmed)  # a cut that broke the code fails here, not in a user's process
    return trimmed


