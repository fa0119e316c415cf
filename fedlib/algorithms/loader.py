"""Methods from outside the repository: a method file (``path/to/my_method.py``) or an installed package's entry
point (group :data:`ENTRY_POINT_GROUP`, ``fedlib.methods``), loaded as a method the engine, the cache and the
benchmark treat like a registered one, without editing fedlib.

A loaded method is a subclass of the author's class named ``user:<stem>`` (the file's stem, or the entry point's
name) with two more hyperparameters: ``source`` (the file's absolute path, or ``entry-point:<name>``) and
``source_sha256`` (the SHA-256 of the file's bytes as they were imported). Both are fields, so a run's config
carries them and its run id (:func:`fedlib.config.run_id`) hashes them: an edited file gives new run ids and never
reads a run of the old one, and :func:`fedlib.algorithms.make_algorithm` in a fresh process (a worker of a spawned
pool, ``python -m fedlib run <run folder>/config.yaml``) imports the method again from ``source``, refusing a file
whose bytes no longer hash to ``source_sha256`` with one line.

User methods are kept apart from :data:`fedlib.algorithms.ALGORITHMS` (the registered methods, which the
studies and tests enumerate); :func:`registered` lends one to it for a call that reads the registry by name
(:func:`fedlib.privacy.what_server_holds`). :func:`checked_method` loads and runs the contract check
(:func:`fedlib.algorithms.checks.check_method`) once per file version. docs/your_method.md is the author's guide.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
import sys
import time
import types
from pathlib import Path

from fedlib.algorithms.base import Algorithm
from fedlib.validation import ConfigError, Options

USER_PREFIX = "user:"
ENTRY_POINT_GROUP = "fedlib.methods"
ENTRY_POINT_PREFIX = "entry-point:"
_MODULES = "fedlib_user_methods"    # the package name the method files are imported under
_STEM = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

#: ``{(source, sha256): class}``: every version of every method loaded in this process
_LOADED: dict[tuple[str, str], type] = {}
#: ``{name: class}``: the version of each user method loaded last
USER_METHODS: dict[str, type] = {}
#: ``{(source, sha256): seconds}``: the versions that passed the contract check, and what it took
_CHECKED: dict[tuple[str, str], float] = {}
#: ``{entry point name: sha256}``: an entry point's module is imported once per process; its hash then
_EP_SHA: dict[str, str] = {}


def is_user(name) -> bool:
    """Whether ``name`` names a user method (``user:<stem>``)."""
    return isinstance(name, str) and name.startswith(USER_PREFIX)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def entry_points() -> dict:
    """``{name: EntryPoint}`` of the installed group :data:`ENTRY_POINT_GROUP`."""
    from importlib.metadata import entry_points as eps

    return {ep.name: ep for ep in eps(group=ENTRY_POINT_GROUP)}


def canonical_source(source, field: str = "--method") -> str:
    """A method's source as a config holds it: a method file's absolute path, or ``entry-point:<name>``. ``source``
    may be a path (relative to the working directory), ``entry-point:<name>`` or the bare name of an installed
    entry point; anything else is a one-line :class:`ConfigError` naming ``field``."""
    if isinstance(source, Path):
        source = str(source)
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(field, source, "a method file (a .py path) or an installed entry point of group "
                          f"{ENTRY_POINT_GROUP}")
    if source.startswith(ENTRY_POINT_PREFIX):
        return source
    path = Path(source).expanduser()
    if path.suffix == ".py" or path.exists() or "/" in source:
        path = path.resolve()
        if not path.is_file():
            raise ConfigError(field, source, "an existing method file (a .py path)"
                              + (" (that path is a folder)" if path.is_dir() else ""))
        if path.suffix != ".py":
            raise ConfigError(field, source, "a method file ending in .py")
        return str(path)
    installed = entry_points()
    if source in installed:
        return ENTRY_POINT_PREFIX + source
    allowed = (f"a method file (a .py path) or an installed entry point of group {ENTRY_POINT_GROUP}"
               + (": one of " + ", ".join(sorted(installed)) if installed else " (none is installed)"))
    raise ConfigError(field, source, allowed)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError("method file", str(path), "a readable file",
                          message=f"{path}: unreadable ({exc.strerror or type(exc).__name__})") from None


def load_method(source, field: str = "--method") -> type[Algorithm]:
    """The user method of ``source`` (:func:`canonical_source`) as it is now: its file imported (or the version
    already imported whose bytes hash the same), its method class found and made ``user:<stem>`` with the
    ``source`` and ``source_sha256`` hyperparameters. A file that does not import, defines no method or several,
    or whose class is not a frozen dataclass on :class:`Algorithm`, is one line (:class:`ConfigError`)."""
    source = canonical_source(source, field)
    if source.startswith(ENTRY_POINT_PREFIX):
        return _load_entry_point(source)
    path = Path(source)
    data = _read(path)
    digest = sha256(data)
    if (source, digest) in _LOADED:
        cls = _LOADED[(source, digest)]
        USER_METHODS[cls.name] = cls
        return cls
    stem = path.stem
    module = _import_file(path, data, digest)
    return _derive(_method_class(module, path.name), stem, source, digest, path.name)


def _import_file(path: Path, data: bytes, digest: str) -> types.ModuleType:
    """Execute exactly the bytes that were hashed, as module ``fedlib_user_methods.<stem>_<sha12>``; a method that
    registers itself (``@register``) leaves the registry as it was."""
    from fedlib.algorithms.registry import ALGORITHMS

    name = f"{_MODULES}.{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}_{digest[:12]}"
    if _MODULES not in sys.modules:
        package = types.ModuleType(_MODULES)
        package.__path__ = []
        sys.modules[_MODULES] = package
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    before = dict(ALGORITHMS)
    try:
        code = compile(data, str(path), "exec")
        exec(code, module.__dict__)  # noqa: S102 - the method file the user asked to run
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise ConfigError("method file", str(path), "a Python file that imports", message=(
            f"{path.name}: import: SyntaxError at line {exc.lineno}: {exc.msg}; expected a Python file that imports"
        )) from None
    except Exception as exc:  # noqa: BLE001 - whatever the file raises, in one line
        sys.modules.pop(name, None)
        raise ConfigError("method file", str(path), "a Python file that imports", message=(
            f"{path.name}: import: raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]}{_beside(path, exc)}"
            "; expected a Python file that imports")) from None
    finally:
        ALGORITHMS.clear()
        ALGORITHMS.update(before)
    return module


def _beside(path: Path, exc: Exception) -> str:
    """Where ``exc`` is a module not found that lies beside the method file: why it is not imported."""
    top = (getattr(exc, "name", None) or "").split(".")[0] if isinstance(exc, ModuleNotFoundError) else ""
    found = next((p for p in (path.parent / f"{top}.py", path.parent / top) if top and p.exists()), None)
    if found is None:
        return ""
    return (f" ({found.name} beside it is not imported: a method is one file, whose SHA-256 names its runs; put "
            "that code in it, or install it as a package)")


def _method_class(module, where: str) -> type:
    """The method a module defines: its ``METHOD``, else the one :class:`Algorithm` subclass defined in it that
    no other of its classes extends."""
    from fedlib.algorithms.checks import ContractViolation

    chosen = module.__dict__.get("METHOD")
    if chosen is not None:
        if not (isinstance(chosen, type) and issubclass(chosen, Algorithm)):
            raise ContractViolation("METHOD", f"is {chosen!r}; expected the method's class", where)
        return chosen
    own = [v for v in vars(module).values()
           if isinstance(v, type) and issubclass(v, Algorithm) and v.__module__ == module.__name__]
    leaves = [c for c in own if not any(o is not c and issubclass(o, c) for o in own)]
    if not leaves:
        raise ContractViolation("class", "defines no method; expected one class on PrototypeMethod, FedAvg or "
                                "Algorithm (docs/method_template.py)", where)
    if len(leaves) > 1:
        raise ContractViolation("class", f"defines {len(leaves)} methods ({', '.join(c.__name__ for c in leaves)}); "
                                "expected one, or METHOD = <the class to run>", where)
    return leaves[0]


def _derive(base: type, stem: str, source: str, digest: str, where: str) -> type:
    """``base`` as user method ``user:<stem>``: a frozen dataclass subclass with the ``source`` and
    ``source_sha256`` hyperparameters (each allowing its one value), cached for this version of the file."""
    from fedlib.algorithms.checks import ContractViolation, check_declarations

    if not _STEM.match(stem):
        raise ConfigError("method file", stem, "a file name of letters, digits, '_', '.' and '-' (it names the "
                          "method: user:<stem>)")
    try:
        check_declarations(base)
    except ContractViolation as exc:
        raise ContractViolation(exc.hook, exc.what, where) from None
    name = USER_PREFIX + stem
    namespace = {"name": name, "__module__": base.__module__, "__qualname__": base.__qualname__,
                 "CONSTRAINTS": {"source": Options((source,)), "source_sha256": Options((digest,))},
                 "__doc__": base.__doc__}
    try:
        cls = dataclasses.make_dataclass(
            base.__name__, [("source", str, dataclasses.field(default=source)),
                            ("source_sha256", str, dataclasses.field(default=digest))],
            bases=(base,), frozen=True, namespace=namespace)
    except (TypeError, ValueError) as exc:
        raise ContractViolation("class", f"cannot take the source fields ({exc}); expected a frozen dataclass "
                                "whose fields all have defaults", where) from None
    _LOADED[(source, digest)] = cls
    USER_METHODS[name] = cls
    return cls


def _load_entry_point(source: str) -> type:
    """An installed entry point's method: the class it names, or the one method of the module it names. Its module
    is imported once per process, so its file must hash as it did then."""
    import inspect

    ep_name = source[len(ENTRY_POINT_PREFIX):]
    installed = entry_points()
    if ep_name not in installed:
        raise ConfigError("algorithm.source", source, f"an installed entry point of group {ENTRY_POINT_GROUP}"
                          + (": one of " + ", ".join(ENTRY_POINT_PREFIX + n for n in sorted(installed))
                             if installed else " (none is installed)"))
    try:
        obj = installed[ep_name].load()
    except Exception as exc:  # noqa: BLE001
        raise ConfigError("method entry point", ep_name, "an entry point that imports", message=(
            f"entry point {ep_name}: import: raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")) \
            from None
    base = obj if isinstance(obj, type) else _method_class(obj, f"entry point {ep_name}")
    try:
        path = Path(inspect.getsourcefile(base) or "")
    except TypeError:
        path = Path("")
    if not path.is_file():
        raise ConfigError("method entry point", ep_name, "a method defined in a Python source file (its SHA-256 "
                          "enters the run ids)")
    digest = sha256(_read(path))
    imported = _EP_SHA.setdefault(ep_name, digest)
    if imported != digest:
        raise ConfigError("method entry point", ep_name, "a file unchanged since it was imported", message=(
            f"entry point {ep_name}: {path} changed since this process imported it; restart the process (Python "
            "imports a package once) so that the code run and its hash agree"))
    if (source, digest) in _LOADED:
        return _LOADED[(source, digest)]
    return _derive(base, ep_name, source, digest, f"entry point {ep_name}")


def class_for(name: str, spec: dict) -> tuple[type, dict]:
    """The class of user method ``name`` for an algorithm ``spec`` (its ``source`` and, where given,
    ``source_sha256``) and the spec with ``source`` made canonical: what :func:`fedlib.algorithms.make_algorithm`
    builds. A missing source, a file that changed since the config was made (another SHA-256) or a name that is not
    the file's are one line each."""
    source = spec.get("source")
    if source is None:
        raise ConfigError("algorithm.source", None, f"the method file (a .py path) or entry point that {name} was "
                          "loaded from (a user method's config carries it)")
    cls = load_method(source, field="algorithm.source")
    if cls.name != name:
        raise ConfigError("algorithm.name", name, f"{cls.name!r}, the name of the method in {source}")
    want, now = spec.get("source_sha256"), cls.__dataclass_fields__["source_sha256"].default
    if want is not None and want != now:
        raise ConfigError("algorithm.source_sha256", want, now, message=(
            f"algorithm.source_sha256: {source} changed since this config was made (its SHA-256 is now {now[:12]}..., "
            f"the config's {str(want)[:12]}...); the config's runs are those of the earlier file: load the method "
            "again to make runs of this one"))
    return cls, {**spec, "source": cls.__dataclass_fields__["source"].default}


def checked_method(source, field: str = "--method") -> tuple[type, float, bool]:
    """``(class, seconds, fresh)``: :func:`load_method`, then the contract check
    (:func:`fedlib.algorithms.checks.check_method`) unless this version of the file passed it in this process
    (``fresh`` False; ``seconds`` what it took then). A violation is one line (:class:`ContractViolation`) naming
    the file, the hook and what was expected."""
    from fedlib.algorithms.checks import ContractViolation, check_method

    cls = load_method(source, field)
    fields = cls.__dataclass_fields__
    key = (fields["source"].default, fields["source_sha256"].default)
    if key in _CHECKED:
        return cls, _CHECKED[key], False
    where = Path(key[0]).name if not key[0].startswith(ENTRY_POINT_PREFIX) else key[0]
    t0 = time.perf_counter()
    try:
        check_method(cls)
    except ContractViolation as exc:
        raise ContractViolation(exc.hook, exc.what, where) from None
    _CHECKED[key] = time.perf_counter() - t0
    return cls, _CHECKED[key], True


def user_class(name: str) -> type | None:
    """The version of user method ``name`` loaded last in this process, or ``None``."""
    return USER_METHODS.get(name)


@contextlib.contextmanager
def registered(cls: type):
    """Within it, ``cls`` is in :data:`fedlib.algorithms.ALGORITHMS` under its name (for a function that reads a
    method's class by name); the registry is as before afterwards."""
    from fedlib.algorithms.registry import ALGORITHMS

    before = ALGORITHMS.get(cls.name)
    ALGORITHMS[cls.name] = cls
    try:
        yield cls
    finally:
        if before is None:
            ALGORITHMS.pop(cls.name, None)
        else:
            ALGORITHMS[cls.name] = before
