"""The `source` fixture: each vLLM tree the contract suite checks (sources.py)."""

import pytest

from .sources import SOURCE_PARAMS, source_of


@pytest.fixture(params=SOURCE_PARAMS)
def source(request):
    return source_of(request.param)
