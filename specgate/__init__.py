"""specgate: a pytest gate for speculative decoding in vLLM.

The ways in are the pytest plugin (`pytest -m gpu`, entry point `specgate.plugin`), the `specgate`
command (specgate.cli) and these modules, the public surface: what a user's conftest.py or tool may
import, kept from release to release (tests/unit/test_public_surface.py pins it). Everything else in the
package is private by convention and may change in any commit.

    specgate.testing   FakeEngine, FakeBoot, FakeScript, fake_session: a whole gate on scripted engines
                       (`pytest -p specgate.testing`, the script in $SPECGATE_FAKE)
    specgate.hooks     pytest_specgate_boot_engine: a conftest.py's own engine for a method, and what
                       the hook receives (Profile, Method: the attributes it may read are listed there)
    specgate.backend   Backend, the engine a hook returns (every member the gate calls), and what its
                       members take and hand back (BatchResult, RequestsResult, ShutdownReport, the
                       figures' SpecCounters, GreedyOutput, LoadRun, RequestTrace, Reply, Completion,
                       KvStats, MemoryReading)
    specgate.errors    SpecgateError and its kinds: what a hook raises (EngineBootError) or a tool catches
    specgate.sampler   the rejection-sampler harness the property tests drive: the reference samplers of
                       each verification rule, SpecRequest, and vLLM's V1 and V2 samplers behind adapters
"""

__version__ = "0.1.0"

# the modules users may import; each one's __all__ names what it offers (the test pins both)
PUBLIC = ("specgate.testing", "specgate.hooks", "specgate.backend", "specgate.errors", "specgate.sampler")
