"""The registry of gates: one entry per gate, and the typed keys its results are filed under.

    GATES                     every gate, in the order a report lists them
    Gate                      one entry: its name (a Gate is the str it is named by, so it is the results
                              table's and the baseline files' value as it is), its stage (when its tests run
                              on a method's engine), the axis its tests are parametrized over, its key type,
                              and what it is: a correctness guard, a scenario, a gate that boots its own
                              engine, one that still judges after its method's engine stopped
    Level, Category, Named    the result keys: the text a results table and a baseline file hold ("C=4",
                              "summary", "doc_prose@T0.5", "greedy"), written by the constructor and read back
                              by `Gate.parse`, nowhere else

The check that judges a gate names it (`Check.gate`) and specgate.checks.CHECKS files it under it: the
registry sits below every package that names a gate (the stored files, the profile's scenarios, the
checks, the report), so it names no check itself. A gate name is spelled here and in the stored files'
format, nowhere else: code says `gates.SPEEDUP`, not "speedup".
"""

from __future__ import annotations

CATEGORY = "category"  # the axis of a gate parametrized by the profile's prompt categories (and temperatures)
CONCURRENCY = "concurrency"  # ... by the profile's concurrency levels


class Key(str):
    """A result key: the text the results table and the baseline files hold, with its typed value."""

    __slots__ = ()  # (a str subclass has no other slots: a key's value lives in its __dict__)


class Level(Key):
    """A concurrency level ('C=4'), or None: the summary over the levels ('summary')."""

    def __new__(cls, concurrency: int | None) -> Level:
        key = super().__new__(cls, "summary" if concurrency is None else f"C={int(concurrency)}")
        key.concurrency = None if concurrency is None else int(concurrency)
        return key

    def __getnewargs__(self):
        return (self.concurrency,)

    @classmethod
    def parse(cls, text: str) -> Level:
        if text == "summary":
            return cls(None)
        if not text.startswith("C=") or not text[2:].isdigit():
            raise ValueError(f"not a concurrency key: {text!r} (C=<level> or summary)")
        return cls(int(text[2:]))


class Category(Key):
    """A prompt category at greedy decoding ('doc_prose') or at a sampling temperature ('doc_prose@T0.5')."""

    def __new__(cls, category: str, temperature: float = 0.0) -> Category:
        key = super().__new__(cls, category if not temperature else f"{category}@T{temperature:g}")
        key.category, key.temperature = str(category), float(temperature)
        return key

    def __getnewargs__(self):
        return (self.category, self.temperature)

    @classmethod
    def parse(cls, text: str) -> Category:
        category, _, temperature = text.partition("@T")
        return cls(category, float(temperature) if temperature else 0.0)


class Named(Key):
    """The one key of a gate without an axis ('greedy', 'constrained', 'engine' / 'overhead')."""

    __slots__ = ()

    @classmethod
    def parse(cls, text: str) -> Named:
        return cls(text)


class Gate(str):
    """One gate. Compares and hashes as its name."""

    def __new__(
        cls,
        name: str,
        *,
        stage: int,
        axis: str = "",
        keys: tuple[str, ...] = (),
        correctness: bool = False,
        scenario: bool = False,
        own_engine: bool = False,
        after_stop: bool = False,
        reference: bool = False,
        canary: tuple[str, ...] = (),
        stored: str = "",
    ) -> Gate:
        gate = super().__new__(cls, name)
        gate.stage = stage  # lower stages of a method's tests run first (a test's marker may say its own)
        gate.axis = axis  # "", CATEGORY or CONCURRENCY: what its tests are parametrized over besides the method
        gate._keys = keys or (name,)  # an axis-less gate's key: one, or (the baseline's, a method's)
        gate.correctness = correctness  # its failure blocks a baselines update (the correctness marker)
        gate.scenario = scenario  # a scenario: it runs where the profile has its [scenarios.<name>] table
        gate.own_engine = own_engine  # its check boots the engine it measures (not the method's)
        # its check judges what the method's engine produced for earlier tests, so its tests still judge after that
        # engine died or stalled (what a stopped engine streamed included); the others say "not judged" then
        gate.after_stop = after_stop
        gate.reference = reference  # the baseline engine runs it too, as the reference its methods are held to
        # when a canary (a deliberately worse method) runs it: "always", as every engine does; "mimic", when the
        # canary mimics another method in this gate ([methods.X] canary_of names it); "floors", when the canary
        # has absolute floors of its own; else never
        gate.canary = canary
        # what a baselines update stores of it: its records, under this provenance group of the baseline file
        # (store.baselines: "portable" figures belong to the model and vLLM, the others to a machine or to one
        # scenario's run); "" stores nothing
        gate.stored = stored
        return gate

    def __reduce__(self):  # pickled (xdist, multiprocessing) as the registry's entry of that name
        return (_by_name, (str(self),))

    def key(self, param=None, *, baseline: bool = False) -> Key:
        """The key of a test's parameter: a category (or (category, temperature)), a concurrency level
        (None: the summary), or the gate's one key (the baseline engine's where it has its own)."""
        if self.axis == CATEGORY:
            category, temperature = param if isinstance(param, tuple) else (param, 0.0)
            return Category(category, temperature)
        if self.axis == CONCURRENCY:
            return Level(param)
        return Named(self._keys[0] if baseline or len(self._keys) == 1 else self._keys[1])

    def axis_problem(self, fixturenames) -> str:
        """Why a test of this gate asking for these fixtures cannot be keyed ('' when it can): one that asks
        for another gate's axis (`category` in a speedup test) would be filed under this gate's key without it."""
        asked = [axis for axis in (CATEGORY, CONCURRENCY) if axis in fixturenames and axis != self.axis]
        if not asked:
            return ""
        return (
            f"a test of the {self} gate asks for {', '.join(asked)}, which the {self} gate is not parametrized "
            f"over (its axis: {self.axis or 'none, one key per method'}; specgate/gates.py)"
        )

    def parse(self, text: str) -> Key:
        """A stored or tabled key of this gate, typed (ValueError when it is not one)."""
        return {CATEGORY: Category, CONCURRENCY: Level}.get(self.axis, Named).parse(text)


# Stages on a method's engine: equivalence first (it boots the engine the later stages reuse); acceptance and
# the structured scenario on the greedy pass; the speed trials (speedup's summary, 65, after every level), then
# the load gate on their outputs; the prefix soak after them (its replays warm the prefix cache); memory after
# (the requests scenario's thousands of requests would move the peak); requests and edges before the shutdown
# (lifecycle); preemption last, on an engine of its own with a small KV cache.
EQUIVALENCE = Gate("equivalence", stage=10, keys=("greedy",), correctness=True, canary=("always",))
ACCEPTANCE = Gate("acceptance", stage=20, axis=CATEGORY, canary=("mimic", "floors"), stored="portable")
SPEEDUP = Gate("speedup", stage=60, axis=CONCURRENCY, canary=("mimic",), stored="speed")
LOAD = Gate("load", stage=62, axis=CONCURRENCY, correctness=True, after_stop=True, stored="portable")
MEMORY = Gate("memory", stage=90, keys=("engine", "overhead"), canary=("mimic",), stored="memory")
LIFECYCLE = Gate("lifecycle", stage=100, canary=("always",))
STRUCTURED = Gate("structured", stage=25, keys=("constrained",), scenario=True, reference=True, stored="portable")
PREFIX_SOAK = Gate("prefix_soak", stage=70, keys=("replayed",), scenario=True)
PREEMPTION = Gate("preemption", stage=110, keys=("preempted",), scenario=True, own_engine=True)
REQUESTS = Gate("requests", stage=95, keys=("sent",), scenario=True, reference=True, stored="requests")
EDGES = Gate("edges", stage=96, keys=("classes",), scenario=True, reference=True, stored="portable")

GATES: tuple[Gate, ...] = (
    EQUIVALENCE,
    ACCEPTANCE,
    SPEEDUP,
    LOAD,
    MEMORY,
    LIFECYCLE,
    STRUCTURED,
    PREFIX_SOAK,
    PREEMPTION,
    REQUESTS,
    EDGES,
)
SCENARIOS: tuple[Gate, ...] = tuple(g for g in GATES if g.scenario)
CANARY_GATES: tuple[Gate, ...] = tuple(g for g in GATES if "mimic" in g.canary)  # what [methods.X] canary_of names
_BY_NAME = {str(g): g for g in GATES}


def _by_name(name: str) -> Gate:
    return _BY_NAME[name]


def gate_named(name: str) -> Gate | None:
    """The registry's entry of that name (a stored file's, a marker's), or None."""
    return _BY_NAME.get(str(name))
