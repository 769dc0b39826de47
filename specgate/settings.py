"""A gate run's settings by name, and how the one who gave them spells them.

Below the entry points nothing spells a command-line flag: a message that names a setting (the profile,
the methods, strict, ...) says it through the `Spelling` its caller hands down. The pytest plugin hands
its own options (specgate.plugin.options.SPELLING), the `specgate` commands their own flags where they
have one (`specgate calibrate --methods`); a caller that hands none gets each setting's own name
("methods: profile 'x' has no method 'y'").

Neighbours: every package may use it; it imports nothing of specgate's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

# the settings of a gate run (specgate.run.session.RunPlan holds their values)
SETTINGS = ("profile", "methods", "update_baselines", "strict", "endpoints", "dtype", "kill_stale", "out")


@dataclass(frozen=True)
class Spelling:
    """How one caller's user spells each setting (`flags`: setting -> flag; a setting left out is said by its
    name) and the command that runs the gate (`gate_run`, e.g. "pytest -m gpu"; "" when there is none)."""

    flags: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    gate_run: str = ""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.flags) - set(SETTINGS))
        if unknown:
            raise ValueError(f"Spelling: no setting {unknown}; the settings are {', '.join(SETTINGS)}")
        object.__setattr__(self, "flags", MappingProxyType(dict(self.flags)))

    def __call__(self, setting: str) -> str:
        if setting not in SETTINGS:
            raise ValueError(f"no setting {setting!r}; the settings are {', '.join(SETTINGS)}")
        return self.flags.get(setting, setting)

    def but(self, **flags: str) -> Spelling:
        """This spelling with some settings spelled otherwise (a command's own flags over the gate's)."""
        return replace(self, flags={**self.flags, **flags})

    def args(self, **settings: Any) -> list[str]:
        """These settings as command-line arguments, in the order given (True: a switch; None or False: left
        out): what a caller that starts a gate run passes it."""
        out: list[str] = []
        for name, value in settings.items():
            if value is not None and value is not False:
                out += [self(name)] if value is True else [self(name), str(value)]
        return out

    def command(self, **settings: Any) -> str:
        """The gate run with these settings as its user would type it (the gate command, then `args`); without a
        gate command, in words: `a gate run with profile cpu-tiny, update_baselines`."""
        if self.gate_run:
            return " ".join([self.gate_run, *self.args(**settings)])
        given = [(self(name), value) for name, value in settings.items() if value is not None and value is not False]
        return "a gate run with " + ", ".join(said if value is True else f"{said} {value}" for said, value in given)


NAMES = Spelling()  # each setting by its own name
