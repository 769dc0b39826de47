"""The embedded zoo's recipe: training, measuring and the model card (fixtures/zoo/MODEL_CARD.md).

    python -m tools.zoo.train      train the zoo from local text (seeded; about 1.5 h on 2 cores)
    python -m tools.zoo.measure    measure acceptance and speed in vLLM's CPU engine, refresh the card
    python -m tools.zoo.build      check the committed zoo; --random: random weights in seconds

Run from the repository root. The suite itself needs none of this at run time: specgate.models
resolves `zoo:NAME` and checks the committed files. These tools import specgate, never the reverse.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# The prompts train.py's offline checks and measure.py run on (the cpu-tiny profile's set).
EVAL_PROMPTS = Path("fixtures/prompts/embedded.jsonl")
# A greedy loop (measure.py, shown on the card): the output ends in a cycle of at most LOOP_MAX_PERIOD
# tokens turned at least LOOP_MIN_TURNS times, over at least LOOP_MIN_TOKENS tokens (so ")))" or a
# blank-line run is not one). 48-token windows of the embedded prompts (real text, one every 16
# tokens) all score 0 with these; 3 turns missed the target's prose loop ("A string containing the
# ... recurmended to the data stream.", twice in 48 tokens).
LOOP_MAX_PERIOD, LOOP_MIN_TURNS, LOOP_MIN_TOKENS = 24, 2, 16


def prompts_digest(root: Path | str) -> str:
    """sha256 of the embedded prompt file: tells whether stored figures were computed on today's prompts."""
    return hashlib.sha256((Path(root) / EVAL_PROMPTS).read_bytes()).hexdigest()
