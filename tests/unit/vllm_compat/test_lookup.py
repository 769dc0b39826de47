"""An internal's fields are found where vLLM keeps them: dataclass fields, class members, and the attributes a
class's methods assign to `self` (Model Runner V2's runner keeps its rejection sampler, request states and
speculator that way), in an unpacked source tree and in an imported class; one that is not there is named."""

import sys
import textwrap

from specgate.vllm_compat import Internal, problems

RUNNER = textwrap.dedent(
    """
    class Runner:
        mode: str = "v2"

        def __init__(self, config):
            self.req_states = None
            self.sampler, self.rejection_sampler = None, None
            self.count: int = 0

        def load_model(self):
            self.speculator = object()

        def add_requests(self, scheduler_output):
            pass
    """
)


def test_the_attributes_a_class_assigns_to_self_are_its_fields_in_a_source_tree(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "runner.py").write_text(RUNNER)
    have = ("mode", "req_states", "sampler", "rejection_sampler", "count", "speculator", "add_requests")
    assert problems(Internal("pkg.runner:Runner", "", fields=have), tmp_path) == []
    said = problems(Internal("pkg.runner:Runner", "", fields=("speculator", "drafter")), tmp_path)
    assert said == ["pkg.runner:Runner has no field(s) ['drafter']"]


def test_the_attributes_a_class_assigns_to_self_are_its_fields_when_imported(tmp_path, monkeypatch):
    (tmp_path / "sg_lookup_runner.py").write_text(RUNNER)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        have = ("req_states", "rejection_sampler", "speculator", "add_requests")
        assert problems(Internal("sg_lookup_runner:Runner", "", fields=have)) == []
        said = problems(Internal("sg_lookup_runner:Runner", "", fields=("sampler", "drafter")))
        assert said == ["sg_lookup_runner:Runner has no field(s) ['drafter']"]
    finally:
        sys.modules.pop("sg_lookup_runner", None)
