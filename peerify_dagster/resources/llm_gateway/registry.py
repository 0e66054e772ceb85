"""The model registry: models.yaml's named models and the active profile's role -> model(s) map.

Environment variables override the file (PEERIFY_MODELS_FILE, PEERIFY_LLM_PROFILE, PEERIFY_ROLE_<ROLE>,
PEERIFY_LOCAL_GGUF); every mistake is reported in one line naming the file or variable, the key and the value.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from peerify_dagster.domain.records import RecordError, decoded
from peerify_dagster.resources.llm_gateway.errors import ConfigurationError
from peerify_dagster.resources.local_llm import LocalModelError, check_gguf_file, resolve_packaged_gguf

DEFAULT_MODELS_FILE = Path(__file__).resolve().parents[3] / "models.yaml"
BACKENDS = ("openai", "anthropic", "vllm", "local")
STRUCTURED_OUTPUT_MODES = ("json_schema", "json_object_schema", "json_object", "tool", "none")
DECODING_KEYS = frozenset(
    {"temperature", "top_p", "max_tokens", "seed", "stop", "presence_penalty", "frequency_penalty", "reasoning_effort"}
)


@dataclass(frozen=True)
class ModelSpec:
    """One named model of models.yaml."""

    name: str
    backend: str
    model: str
    base_url: str | None = None
    base_url_env: str | None = None
    base_url_fallback_env: str | None = None  # read when base_url_env is unset (a shared variable, e.g. VLLM_BASE_URL)
    one_model_per_server: bool = False  # its server serves this model only (`vllm serve`): no other model may share it
    api_key_env: str | None = None
    api_key_required: bool = True
    context_window: int = 8192
    price_in_per_million: float = 0.0
    price_out_per_million: float = 0.0
    max_concurrency: int = 1
    requests_per_minute: float | None = None
    structured_output: str = "json_schema"
    max_tokens_param: str = "max_tokens"
    stream: bool = False
    # Submit `map`'s calls through the provider's batch API (half price, results within a day; batches.py).
    batch: bool = False
    decoding: Mapping[str, Any] = field(default_factory=dict)
    gguf_package: str | None = None
    gguf_file: str | None = None
    gguf_path_env: str | None = None

    @classmethod
    def from_mapping(cls, name: str, raw: Mapping[str, Any]) -> ModelSpec:
        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"model {name!r}: expected a mapping of settings, got {raw!r}")
        known = {f.name for f in fields(cls)} - {"name"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigurationError(f"model {name!r}: unknown settings {unknown}")
        spec = cls(name=name, **{**raw, "decoding": dict(raw.get("decoding") or {})})
        if spec.backend not in BACKENDS:
            raise ConfigurationError(f"model {name!r}: backend {spec.backend!r} is not one of {BACKENDS}")
        if spec.structured_output not in STRUCTURED_OUTPUT_MODES:
            raise ConfigurationError(
                f"model {name!r}: structured_output {spec.structured_output!r} is not one of {STRUCTURED_OUTPUT_MODES}"
            )
        bad_decoding = sorted(set(spec.decoding) - DECODING_KEYS)
        if bad_decoding:
            raise ConfigurationError(f"model {name!r}: unknown decoding parameters {bad_decoding}")
        if spec.max_concurrency < 1:
            raise ConfigurationError(f"model {name!r}: max_concurrency must be at least 1")
        if spec.batch and not spec.is_remote:
            raise ConfigurationError(f"model {name!r}: batch: true needs backend openai or anthropic (the providers' "
                                     f"batch APIs), not {spec.backend!r}")
        return spec

    @property
    def is_remote(self) -> bool:
        return self.backend in ("openai", "anthropic")

    def resolved_base_url(self, env: Mapping[str, str]) -> str | None:
        return self.base_url_with_source(env)[0]

    def base_url_with_source(self, env: Mapping[str, str]) -> tuple[str | None, str]:
        """The base URL (`base_url_env`, else `base_url_fallback_env`, else models.yaml's `base_url`) and where it
        came from, for messages."""
        for variable in (self.base_url_env, self.base_url_fallback_env):
            if variable and env.get(variable):
                return env[variable], variable
        return self.base_url, "models.yaml base_url"

    def api_key(self, env: Mapping[str, str]) -> str | None:
        return env.get(self.api_key_env) if self.api_key_env else None

    def missing_key_problem(self, env: Mapping[str, str]) -> str | None:
        """Why this model cannot authenticate, or None."""
        if not self.is_remote or not self.api_key_required or self.api_key(env):
            return None
        if not self.api_key_env:
            return f"model {self.name!r} needs an API key but models.yaml names no api_key_env for it"
        return f"model {self.name!r} needs environment variable {self.api_key_env} (its API key), which is not set"

    def local_model_path(self, env: Mapping[str, str]) -> Path:
        """The GGUF file of a local model (`gguf_path_env` when set, else the file shipped in `gguf_package`),
        checked to be a GGUF file."""
        override = env.get(self.gguf_path_env) if self.gguf_path_env else None
        if override:
            path, source = Path(override), f"environment variable {self.gguf_path_env}={override!r}"
        elif self.gguf_package and self.gguf_file:
            source = f"models.yaml gguf_package {self.gguf_package!r}, gguf_file {self.gguf_file!r}"
            try:
                path = resolve_packaged_gguf(self.gguf_package, self.gguf_file)
            except LocalModelError as error:
                raise ConfigurationError(f"{source}: {error}") from error
        else:
            raise ConfigurationError(
                f"local model {self.name!r} needs gguf_package and gguf_file in models.yaml "
                f"(or environment variable {self.gguf_path_env or 'PEERIFY_LOCAL_GGUF'})"
            )
        try:
            check_gguf_file(path)
        except LocalModelError as error:
            raise ConfigurationError(f"{source}: {error}") from error
        return path


@dataclass(frozen=True)
class ModelRegistry:
    """Named models plus the active profile's role -> model(s) map, env overrides applied."""

    models: Mapping[str, ModelSpec]
    profile: str
    roles: Mapping[str, tuple[str, ...]]
    path: Path | None = None

    @classmethod
    def load(
        cls, path: Path | None = None, env: Mapping[str, str] | None = None, profile: str | None = None
    ) -> ModelRegistry:
        env = os.environ if env is None else env
        if path is None and env.get("PEERIFY_MODELS_FILE"):
            path = Path(env["PEERIFY_MODELS_FILE"])
            if not path.is_file():
                raise ConfigurationError(f"environment variable PEERIFY_MODELS_FILE={str(path)!r} names no file")
        path = Path(path or DEFAULT_MODELS_FILE)
        raw = _read_yaml(path)
        models: dict[str, ModelSpec] = {}
        for name, entry in _mapping(raw.get("models"), f"{path}: models").items():
            try:
                models[str(name)] = ModelSpec.from_mapping(str(name), entry)
            except (ConfigurationError, TypeError, ValueError) as error:
                raise ConfigurationError(f"{path}: models.{name}: {' '.join(str(error).split())}") from error
        profiles = {str(name): value for name, value in _mapping(raw.get("profiles"), f"{path}: profiles").items()}
        default = raw.get("default_profile")
        if default is not None and not isinstance(default, str):
            raise ConfigurationError(f"{path}: default_profile must be a profile's name, got {default!r}")
        chosen = _choose_profile(path, profiles, default, profile, env)
        roles: dict[str, tuple[str, ...]] = {}
        for role, value in _mapping(profiles[chosen], f"{path}: profiles.{chosen}").items():
            roles[role] = _role_models(value, models, f"{path}: profiles.{chosen}.{role}")
        for key, value in env.items():
            if key.startswith("PEERIFY_ROLE_") and value.strip():
                roles[key.removeprefix("PEERIFY_ROLE_").lower()] = _role_models(
                    value, models, f"environment variable {key}={value!r}")
        return cls(models=models, profile=chosen, roles=roles, path=path)

    def model(self, name: str) -> ModelSpec:
        if name not in self.models:
            raise ConfigurationError(f"unknown model {name!r}; known models: {sorted(self.models)}")
        return self.models[name]

    def models_for_role(self, role: str) -> list[str]:
        if role not in self.roles:
            raise ConfigurationError(
                f"role {role!r} is not in profile {self.profile!r} of {self.path}; roles: {sorted(self.roles)}"
            )
        return list(self.roles[role])

    def shared_server_problems(self, names: Iterable[str], env: Mapping[str, str]) -> list[str]:
        """One line for each base URL that models of `names` serving one model per server (vLLM) share with a
        different model (another model id: the same weights sampled differently may share their server)."""
        by_url: dict[str, dict[str, ModelSpec]] = {}
        for name in names:
            spec = self.model(name)
            url = spec.resolved_base_url(env)
            if spec.one_model_per_server and url:
                by_url.setdefault(url.rstrip("/"), {}).setdefault(spec.model, spec)
        problems = []
        for url, specs in by_url.items():
            if len(specs) > 1:
                described = [f"{spec.name!r} ({spec.model}, from {spec.base_url_with_source(env)[1]})"
                             for spec in specs.values()]
                named = ", ".join(described[:-1]) + " and " + described[-1]
                own = ", ".join(spec.base_url_env for spec in specs.values() if spec.base_url_env)
                problems.append(f"models {named} resolve to the same base URL {url}, but a vLLM server serves one "
                                f"model: point each at its own server ({own or 'base_url_env in models.yaml'})")
        return problems

    def resolve(self, target: str) -> tuple[str | None, ModelSpec]:
        """(role, model) for a role name or a model name; a role must map to exactly one model."""
        if target in self.roles:
            names = self.roles[target]
            if len(names) != 1:
                raise ConfigurationError(
                    f"role {target!r} maps to {len(names)} models {list(names)}; "
                    f"call each by model name with role={target!r}"
                )
            return target, self.models[names[0]]
        if target in self.models:
            return None, self.models[target]
        raise ConfigurationError(
            f"{target!r} is neither a role of profile {self.profile!r} ({sorted(self.roles)}) "
            f"nor a model ({sorted(self.models)})"
        )


def _mapping(value: Any, where: str) -> Mapping:
    """A mapping of the file ({} for an empty key), else ConfigurationError naming where it is."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigurationError(f"model registry {path} not found")
    try:
        raw = yaml.safe_load(decoded(path.read_bytes(), str(path))) or {}
    except RecordError as error:  # not UTF-8: `file:line: reason`
        raise ConfigurationError(str(error)) from None
    except (ValueError, RecursionError) as error:  # a number past int()'s digits, deep nesting
        raise ConfigurationError(f"{path}: not valid YAML ({' '.join(str(error).split())})") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigurationError(f"{path}{where}: not valid YAML ({' '.join(str(problem).split())})") from error
    if not isinstance(raw, dict):
        raise ConfigurationError(f"{path}: expected a mapping with keys models and profiles, got {type(raw).__name__}")
    return raw


def chosen_setting(argument: str | None, env: Mapping[str, str], env_var: str, label: str) -> tuple[str, str] | None:
    """A gateway setting given as an LLMGateway argument, else by `env_var`, with where it came from (for error
    messages); None when neither gives it."""
    if argument:
        return argument, f"{label} {argument!r} (LLMGateway argument)"
    if env.get(env_var):
        return env[env_var], f"environment variable {env_var}={env[env_var]!r}"
    return None


def _choose_profile(
    path: Path, profiles: Mapping[str, Any], default: str | None, argument: str | None, env: Mapping[str, str]
) -> str:
    picked = chosen_setting(argument, env, "PEERIFY_LLM_PROFILE", "profile")
    if picked is not None:
        chosen, source = picked
        problem = f"{source} names no profile of {path}"
    else:
        chosen = default or "offline"
        problem = f"{path}: default_profile {chosen!r} is not one of its profiles"
    if chosen not in profiles:
        raise ConfigurationError(f"{problem} (profiles: {', '.join(sorted(profiles)) or 'none'})")
    return chosen


def _role_models(value: Any, models: Mapping[str, ModelSpec], source: str) -> tuple[str, ...]:
    """A role's model names (a comma list or a YAML list), each checked against the registry."""
    if isinstance(value, str):
        names = tuple(part.strip() for part in value.split(",") if part.strip())
    elif isinstance(value, list) and all(isinstance(name, str) for name in value):
        names = tuple(value)
    else:
        names = ()
    if not names:
        raise ConfigurationError(f"{source} names no model (expected a model name or a list of them, got {value!r})")
    unknown = [name for name in names if name not in models]
    if unknown:
        raise ConfigurationError(f"{source} names unknown models {unknown}; models: {', '.join(sorted(models))}")
    return names
