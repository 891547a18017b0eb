"""Client-side label selectors: the grammar of `kubectl get -l`, matched as the API server does."""

from __future__ import annotations

import pytest

from fleetmedic.model.selector import parse

LABELS = {"pool": "train", "gpu": "h100", "node.kubernetes.io/instance-type": "p5.48xlarge"}


@pytest.mark.parametrize(
    "text,matches",
    [
        ("", True),
        ("pool=train", True),
        ("pool==train", True),
        ("pool=infer", False),
        ("pool!=infer", True),
        ("missing!=x", True),  # as the API server: a missing label is "not x"
        ("pool in (train, infer)", True),
        ("pool notin (train)", False),
        ("missing notin (a,b)", True),
        ("gpu", True),
        ("!gpu", False),
        ("!missing", True),
        ("pool=train,gpu in (h100,h200)", True),
        ("pool=train, gpu in (a100)", False),
        ("node.kubernetes.io/instance-type in (p5.48xlarge,p5en.48xlarge)", True),
    ],
)
def test_matches_like_the_api_server(text, matches):
    assert parse(text).matches(LABELS) is matches


@pytest.mark.parametrize("bad", ["pool in ()", "pool in (a b)", "=x", "pool=a=b", "po ol"])
def test_bad_selectors_name_the_bad_part(bad):
    with pytest.raises(ValueError, match="bad label selector part"):
        parse(bad)
