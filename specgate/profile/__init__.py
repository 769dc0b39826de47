"""Profiles: a TOML file -> a typed, validated `Profile` with its `Method` matrix.

    spec.py     what a profile holds, every key declared once on its dataclass field (type, bound,
                default, meaning, whether it changes what a run measures); tables.py its tables
    parse.py    TOML -> Profile as written: keys, types, bounds, the rules between keys (no I/O)
    resolve.py  the file read; models, prompt files, vLLM's methods and plants resolved on this machine
    schema.py   declared settings: a TOML table's keys, types, bounds and defaults, and the reader that
                holds a table to them (the profile's and the baseline history's fingerprint)
    prompt_sources.py   the entries of `prompts = [...]`: which files a profile's prompts come from
    plants.py   the plants a method's `plant = "<name>"` may name (specgate.engines.plants installs them at boot)

A profile is data: the target model, the prompt sets, the method matrix and the tolerances. Parsing
imports nothing heavy, so `--collect-only` and unit tests stay fast. Every key is checked: an
unknown key, an unknown method, a model path that does not exist or a value out of range raises a
`ProfileError` naming the file and the key.

Neighbours: below are specgate.models (zoo: / paths / hub ids), vllm_compat/ (the methods this vLLM
offers) and errors; above is every package that reads a profile (prompts/, figures/, store/, engines/,
checks/, run/, ...). Nothing here boots an engine or loads a prompt set.
"""

from specgate.profile.parse import parse
from specgate.profile.resolve import find_profile, load_profile, model_ref, profile_dir, resolve
from specgate.profile.spec import (
    BASELINE,
    DEFAULT_DEADLINES,
    DTYPES,
    FLOOR_KEYS,
    HARDWARE,
    LOSSY_REJECTION,
    MODEL_FREE_METHODS,
    Method,
    Profile,
)
from specgate.profile.tables import (
    Equivalence,
    KnownIssue,
    Preemption,
    PrefixSoak,
    Requests,
    Scenarios,
    Speedup,
    Structured,
    Tolerance,
)

__all__ = [
    "BASELINE",
    "DEFAULT_DEADLINES",
    "DTYPES",
    "FLOOR_KEYS",
    "HARDWARE",
    "LOSSY_REJECTION",
    "MODEL_FREE_METHODS",
    "Equivalence",
    "KnownIssue",
    "Method",
    "Preemption",
    "PrefixSoak",
    "Requests",
    "Profile",
    "Scenarios",
    "Speedup",
    "Structured",
    "Tolerance",
    "find_profile",
    "load_profile",
    "model_ref",
    "parse",
    "profile_dir",
    "resolve",
]
