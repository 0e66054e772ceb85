"""Code versions derived from the code: an asset's version is a hash of the code that computes it.

From the asset's functions (the roots), every top-level definition of the project that the code names is followed,
through imports, module aliases and re-exports, to any depth: functions, classes (whole, with their methods and
bases), constants and registries. Each enters the hash as its normalised source, parsed and unparsed, so comments,
docstrings and formatting do not count; a root's decorators (the asset's Dagster declaration) do not count either.
A string the code holds that names a prompt template brings the template's content hash. Nothing is imported or
run to read the code: the same source gives the same versions on any machine, and an edit that reaches no asset
changes none.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from peerify_dagster.domain import prompts as prompt_templates

PROJECT_PACKAGES = ("peerify_dagster",)
VERSION_LENGTH = 16  # hex digits of sha256 kept: ample against collisions among one graph's versions
WHOLE_MODULE = "*"  # the symbol name of a module used as a value (every definition in it counts)
_PROMPT_ID = re.compile(r"[a-z][a-z0-9_]*")


class CodeVersionError(Exception):
    """A function whose source cannot be located or read (built at run time, or its file is gone)."""


@dataclass(frozen=True)
class Symbol:
    """A top-level definition: `name` bound in `module` (by def, class, assignment or a statement that fills it)."""

    module: str
    name: str

    def __str__(self) -> str:
        return f"{self.module}:{self.name}"


@dataclass(frozen=True)
class ModuleRef:
    module: str


@dataclass(frozen=True)
class _Import:
    module: str
    name: str | None  # None: the module itself


@dataclass
class _Module:
    name: str
    is_package: bool
    definitions: dict[str, list[ast.stmt]] = field(default_factory=dict)
    imports: dict[str, _Import] = field(default_factory=dict)


def is_project_module(module: str) -> bool:
    return any(module == package or module.startswith(package + ".") for package in PROJECT_PACKAGES)


# -- reading modules --------------------------------------------------------------------------------------------------

@cache
def _module(name: str) -> _Module | None:
    """The module's top-level bindings, read from its source file (None: not the project's, or no source)."""
    if not is_project_module(name):
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"), filename=spec.origin)
    _strip_docstrings(tree)
    module = _Module(name, spec.submodule_search_locations is not None)
    _bind(module, tree.body)
    return module


def _strip_docstrings(tree: ast.AST) -> None:
    """Remove every statement that is a bare string (docstrings, attribute notes): they do nothing."""
    for node in ast.walk(tree):
        for attribute in ("body", "orelse", "finalbody"):
            body = getattr(node, attribute, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            kept = [stmt for stmt in body
                    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                            and isinstance(stmt.value.value, str))]
            if len(kept) != len(body):
                setattr(node, attribute, kept or ([ast.Pass()] if attribute == "body" else []))


def _is_main_guard(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare)
            and isinstance(stmt.test.left, ast.Name) and stmt.test.left.id == "__name__")


def _bind(module: _Module, body: list[ast.stmt]) -> None:
    for stmt in body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    module.imports[alias.asname] = _Import(alias.name, None)
                else:
                    top = alias.name.split(".")[0]
                    module.imports[top] = _Import(top, None)
        elif isinstance(stmt, ast.ImportFrom):
            source = _absolute(module, stmt.module, stmt.level)
            for alias in stmt.names:
                if alias.name != "*":
                    module.imports[alias.asname or alias.name] = _Import(source, alias.name)
        elif isinstance(stmt, (ast.If, ast.Try)) and not _is_main_guard(stmt):
            _bind(module, [*stmt.body, *getattr(stmt, "orelse", []), *getattr(stmt, "finalbody", []),
                           *[s for handler in getattr(stmt, "handlers", []) for s in handler.body]])
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            module.definitions.setdefault(stmt.name, []).append(stmt)
        elif not _is_main_guard(stmt):
            # assignments bind their targets; any other statement (`REGISTRY.update(...)`, a loop filling a table)
            # belongs to the names it stores into or calls methods of
            for name in _filled_names(stmt):
                module.definitions.setdefault(name, []).append(stmt)


def _filled_names(stmt: ast.stmt) -> set[str]:
    names = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
            names.update(_root_name(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            names.update(_root_name(node.func))
    return names


def _root_name(node: ast.AST) -> list[str]:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return [node.id] if isinstance(node, ast.Name) else []


def _absolute(module: _Module, target: str | None, level: int) -> str:
    if level == 0:
        return target or ""
    base = module.name if module.is_package else module.name.rpartition(".")[0]
    for _ in range(level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{target}" if target else base


# -- resolving names --------------------------------------------------------------------------------------------------

def _has_submodule(module: str, name: str) -> bool:
    try:
        return importlib.util.find_spec(f"{module}.{name}") is not None
    except (ImportError, ValueError):
        return False


def _resolve_in(module_name: str, name: str, seen: frozenset = frozenset()) -> Symbol | ModuleRef | None:
    """What `name` means at the top level of the module: a definition of the project, a project module, or None
    (a builtin, a local, anything outside the project)."""
    if (module_name, name) in seen:
        return None
    module = _module(module_name)
    if module is None:
        return None
    if name in module.definitions:
        return Symbol(module_name, name)
    if name in module.imports:
        return _resolve_import(module.imports[name], seen | {(module_name, name)})
    if module.is_package and _has_submodule(module_name, name):
        return ModuleRef(f"{module_name}.{name}")
    return None


def _resolve_import(target: _Import, seen: frozenset = frozenset()) -> Symbol | ModuleRef | None:
    if not is_project_module(target.module):
        return None
    if target.name is None:
        return ModuleRef(target.module)
    return _resolve_in(target.module, target.name, seen)


def _resolve_chain(found: Symbol | ModuleRef | None, attributes: list[str]) -> Symbol | ModuleRef | None:
    for attribute in attributes:
        if not isinstance(found, ModuleRef):
            break  # an attribute of a definition: the whole definition already counts
        found = _resolve_in(found.module, attribute)
    return found


class _References(ast.NodeVisitor):
    """Names (with the attributes read off them), strings, and the imports made inside a definition."""

    def __init__(self, module: _Module) -> None:
        self.module = module
        self.chains: list[tuple[str, list[str]]] = []
        self.strings: set[str] = set()
        self.local_imports: dict[str, _Import] = {}
        self._locals: list[set[str]] = []  # the names local to each enclosing function: they hide module names

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        for outer in [*getattr(node, "decorator_list", []), *node.args.defaults, *node.args.kw_defaults,
                      getattr(node, "returns", None)]:
            if outer is not None:
                self.visit(outer)
        arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                     *filter(None, [node.args.vararg, node.args.kwarg])]
        for argument in arguments:
            if argument.annotation is not None:
                self.visit(argument.annotation)
        body = node.body if isinstance(node.body, list) else [node.body]
        self._locals.append({argument.arg for argument in arguments} | _assigned_locally(body))
        for stmt in body:
            self.visit(stmt)
        self._locals.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _is_local(self, name: str) -> bool:
        return any(name in scope for scope in self._locals)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attributes, base = [], node
        while isinstance(base, ast.Attribute):
            attributes.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name):
            if not self._is_local(base.id):
                self.chains.append((base.id, attributes[::-1]))
        else:
            self.visit(base)

    def visit_Name(self, node: ast.Name) -> None:
        if not self._is_local(node.id):
            self.chains.append((node.id, []))

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.strings.add(node.value)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            self.local_imports[alias.asname or top] = _Import(alias.name if alias.asname else top, None)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        source = _absolute(self.module, node.module, node.level)
        for alias in node.names:
            self.local_imports[alias.asname or alias.name] = _Import(source, alias.name)


def _assigned_locally(body: list[ast.stmt]) -> set[str]:
    """The names a function body binds (its locals), nested functions' own locals left out; minus `global`s."""
    bound, declared_global, pending = set(), set(), list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Global):
            declared_global.update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            continue  # local imports are resolved as imports (`local_imports`), never hidden
        pending.extend(ast.iter_child_nodes(node))
    return bound - declared_global


@dataclass(frozen=True)
class _Definition:
    text: str  # normalised source
    uses: tuple[Symbol, ...]
    strings: frozenset[str]


def _statements(symbol: Symbol) -> list[ast.stmt]:
    module = _module(symbol.module)
    if module is None:
        return []
    if symbol.name == WHOLE_MODULE:
        return [stmt for name in sorted(module.definitions) for stmt in module.definitions[name]]
    return module.definitions.get(symbol.name, [])


@cache
def _definition(symbol: Symbol, as_root: bool) -> _Definition:
    module = _module(symbol.module)
    texts, uses, strings = [], set(), set()
    for stmt in _statements(symbol):
        decorated = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if as_root and decorated and stmt.decorator_list:
            stmt = _undecorated(stmt)
        texts.append(ast.unparse(stmt))
        texts.extend(_package_versions_named(stmt, module))
        visitor = _References(module)
        visitor.visit(stmt)
        strings |= visitor.strings
        for name, attributes in visitor.chains:
            local = visitor.local_imports.get(name)
            found = _resolve_import(local) if local else _resolve_in(symbol.module, name)
            found = _resolve_chain(found, attributes)
            if isinstance(found, ModuleRef):
                found = Symbol(found.module, WHOLE_MODULE)
            if found is not None and found != symbol:
                uses.add(found)
    return _Definition("\n".join(texts), tuple(sorted(uses, key=str)), frozenset(strings))


def _package_versions_named(stmt: ast.stmt, module: _Module) -> list[str]:
    """A definition that takes a package's version (`package_version(__package__)`, the layout rules' identity)
    counts the whole package: its value changes with any module of it, reached or not."""
    versions = []
    for node in ast.walk(stmt):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == package_version.__name__
                and len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id == "__package__"):
            package = module.name if module.is_package else module.name.rpartition(".")[0]
            versions.append(f"# {package}: {package_version(package)}")
    return versions


def _undecorated(stmt: ast.stmt) -> ast.stmt:
    copy = ast.parse(ast.unparse(stmt)).body[0]
    copy.decorator_list = []
    return copy


# -- roots and versions -----------------------------------------------------------------------------------------------

def root_symbol(function: Callable) -> Symbol:
    """The top-level definition holding the function (itself, or the factory that defines it)."""
    module, qualname = getattr(function, "__module__", None), getattr(function, "__qualname__", None)
    if not module or not qualname or not is_project_module(module):
        raise CodeVersionError(f"{function!r} is not a function of the project ({PROJECT_PACKAGES})")
    symbol = Symbol(module, qualname.split(".")[0])
    if not _statements(symbol):
        raise CodeVersionError(f"{symbol}: no top-level definition of {symbol.name!r} in the module's source")
    return symbol


def reached(roots: Iterable[Symbol]) -> dict[Symbol, _Definition]:
    """Every definition the roots reach, the roots included (undecorated)."""
    roots = list(roots)
    found: dict[Symbol, _Definition] = {}
    pending = [(symbol, True) for symbol in roots]
    while pending:
        symbol, as_root = pending.pop()
        if symbol in found:
            continue
        definition = _definition(symbol, as_root)
        found[symbol] = definition
        pending.extend((used, False) for used in definition.uses if used not in found)
    return found


def _covered(functions: Iterable[Callable]) -> tuple[dict[Symbol, _Definition], list[tuple[str, str]]]:
    """What a code version covers: every definition the functions reach, and (id, sha256) of every prompt template a
    string of theirs names."""
    definitions = reached({root_symbol(function) for function in functions})
    directory = prompt_templates.PROMPTS_DIR
    strings = {string for definition in definitions.values() for string in definition.strings}
    prompts = [(value, prompt_templates.template_hash(value, directory)) for value in sorted(strings)
               if _PROMPT_ID.fullmatch(value) and (directory / f"{value}.md").is_file()]
    return definitions, prompts


def code_version(functions: Iterable[Callable]) -> str:
    """The code version of the code the functions run: a hash of every definition they reach and every prompt
    template named there."""
    definitions, prompts = _covered(functions)
    lines = [f"{symbol}\n{definitions[symbol].text}" for symbol in sorted(definitions, key=str)]
    lines += [f"prompt {prompt_id} {digest}" for prompt_id, digest in prompts]
    return hashlib.sha256("\n\n".join(lines).encode("utf-8")).hexdigest()[:VERSION_LENGTH]


def package_version(package: str) -> str:
    """The code version of a whole package of the project: every module in it, normalised as above."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.submodule_search_locations is None:
        raise CodeVersionError(f"{package} is not a package of the project")
    modules = sorted(f"{package}.{path.stem}" if path.stem != "__init__" else package
                     for folder in spec.submodule_search_locations for path in Path(folder).glob("*.py"))
    texts = [f"{module}\n{ast.unparse(stmt)}" for module in modules
             for stmt in _statements(Symbol(module, WHOLE_MODULE))]
    return hashlib.sha256("\n\n".join(texts).encode("utf-8")).hexdigest()[:VERSION_LENGTH]


def sources_fingerprint() -> str:
    """sha256 of everything a code version can depend on: every source file of the project's packages, the prompt
    templates, and the Python that parses them (its unparser normalises the source)."""
    digest = hashlib.sha256(f"python {sys.version_info[0]}.{sys.version_info[1]}".encode())
    folders = [Path(folder) for package in PROJECT_PACKAGES
               for folder in (importlib.util.find_spec(package).submodule_search_locations or [])]
    files = sorted({*(path for folder in folders for path in folder.rglob("*.py")),
                    *prompt_templates.PROMPTS_DIR.glob("*.md")})
    for path in files:
        digest.update(f"\n{path.name}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class VersionCache:
    """Code versions already derived from these very sources, in a file of this machine's cache folder: a process
    that loads the code location (a command, a run's step, a worker) reads them instead of analysing again. Keyed by
    `sources_fingerprint`, so any edit to the code or a prompt starts a new file; an unreadable or unwritable cache is
    simply not used."""

    def __init__(self, folder: Path | None = None) -> None:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        self.path = (folder or base / "peerify") / f"code-versions-{sources_fingerprint()[:32]}.json"
        try:
            self.known: dict[str, str] = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.known = {}
        self._added = False

    def version(self, functions: Iterable[Callable]) -> str:
        functions = list(functions)
        key = ",".join(sorted(f"{f.__module__}:{f.__qualname__}" for f in functions))
        if key not in self.known:
            self.known[key] = code_version(functions)
            self._added = True
        return self.known[key]

    def save(self) -> None:
        if not self._added:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            temporary.write_text(json.dumps(self.known, sort_keys=True), encoding="utf-8")
            temporary.replace(self.path)  # whole or not at all: a concurrent reader sees one file or the other
        except OSError:
            pass


def reached_names(functions: Iterable[Callable]) -> list[str]:
    """The definitions (`module:name`) and prompts a code version covers, for explaining one."""
    definitions, prompts = _covered(functions)
    return sorted(str(symbol) for symbol in definitions) + [f"prompt:{prompt_id}" for prompt_id, _ in prompts]
