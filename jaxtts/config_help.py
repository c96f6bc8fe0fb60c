"""`train.py --print_config` / `--list_configs`: a resolved config with every key, its value
and a one-line description (from `configs/help.py`), and the variants of each config file."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from jaxtts.errors import ConfigError

CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_config(spec: str):
    """The config of `<file>.py[:<arg>]` (`get_config(arg)`), as `train.py --config` reads it;
    a missing file or unknown variant is a one-line ConfigError."""
    path, _, arg = spec.partition(":")
    if not Path(path).is_file():
        raise ConfigError(
            f"--config {path}: no such config file, expected e.g. configs/ssd.py:deep"
        )
    try:
        return _load(Path(path), "jaxtts_config").get_config(arg or None)
    except KeyError as e:
        raise ConfigError(f"--config {spec}: {e.args[0]}") from None


def apply_overrides(config, overrides: list[str]):
    """`--config.<section>.<key>=<value>` arguments (as `train.py` takes them) applied to
    `config` (an `ml_collections.ConfigDict`) in place: a value is read as a Python literal
    (a string key takes the text as it is) and the ConfigDict's own type check takes it or not.
    An unknown key, a malformed argument or a value of another type is a one-line ConfigError
    naming the argument."""
    for arg in overrides:
        name, eq, text = arg.partition("=")
        if not name.startswith("--config.") or not eq:
            raise ConfigError(f"{arg}: expected --config.<section>.<key>=<value>")
        *path, key = name[len("--config.") :].split(".")
        node = config
        for part in [*path, key]:
            if not hasattr(node, "keys") or part not in node:
                raise ConfigError(f"{name}: unknown config key {'.'.join([*path, key])}")
            parent, node = node, node[part]
        if hasattr(node, "keys"):
            raise ConfigError(
                f"{name}: a section; expected one of its keys ({', '.join(node.keys())})"
            )
        value = text
        if not isinstance(node, str):
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                pass  # left as text: the type check below names what was expected
        try:
            parent[key] = value
        except TypeError:
            raise ConfigError(
                f"{name}={text!r}: expected {type(node).__name__} (e.g. {node!r})"
            ) from None
    return config


def help_table(configs_dir: Path | None = None) -> dict[str, str]:
    """dotted key -> one-line description."""
    path = Path(configs_dir or CONFIGS_DIR) / "help.py"
    return dict(_load(path, "jaxtts_config_help").HELP) if path.is_file() else {}


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    """Nested config dict -> {'a.b.c': value} (lists stay values)."""
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def variants(path: Path) -> list[str]:
    """The variants a config file accepts (its `VARIANTS`, else the keys of its `MODELS`),
    read without executing it."""
    found: dict[str, list[str]] = {}
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", "")
            if name == "VARIANTS":
                found[name] = list(ast.literal_eval(node.value))
            elif name == "MODELS" and isinstance(node.value, ast.Call):
                found[name] = [kw.arg for kw in node.value.keywords]
    return found.get("VARIANTS", found.get("MODELS", []))


def describe(config, spec: str) -> str:
    """The resolved config as `key = value  # description` lines, grouped by section."""
    file, _, variant = spec.partition(":")
    table = help_table(Path(file).parent if Path(file).parent.name == "configs" else None)
    flat = flatten(config.to_dict())
    flat = dict(sorted(flat.items(), key=lambda kv: ("." in kv[0], kv[0])))  # top level first
    width = min(44, max(len(f"{k} = {v!r}") for k, v in flat.items()))
    lines = [f"# {spec} (variants of {file}: {', '.join(variants(Path(file))) or '-'})"]
    section = None
    for key, value in flat.items():
        top = key.split(".")[0] if "." in key else ""
        if top != section:
            section = top
            lines.append(f"\n[{top}]" if top else "")
        left = f"{key} = {value!r}"
        lines.append(f"{left:<{width}}  # {table.get(key, '(no description)')}")
    return "\n".join(line for line in lines if line is not None)


def list_configs(configs_dir: Path | None = None) -> str:
    """One line per config file: its variants, then the title of its docstring."""
    folder = Path(configs_dir or CONFIGS_DIR)
    rows = []
    for path in sorted(folder.glob("*.py")):
        vs = variants(path)
        if not vs:
            continue  # helpers (common.py, help.py)
        doc = (ast.get_docstring(ast.parse(path.read_text())) or "").split("\n\n")[0]
        first = " ".join(doc.split()).split(". ")[0].rstrip(".")  # the first sentence
        rows.append(f"configs/{path.name}:{{{','.join(vs)}}}\n    {first}")
    return "\n".join(rows)
